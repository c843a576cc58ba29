// Checked mode (nabla/checked.h) against toy kernels that break the rules:
// one element past or before their output, far past it (into the guard
// page), an output of another shape than inferred, a write into an input;
// and, in AddressSanitizer builds, that host tensors are exactly their size
// to ASan.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nabla/checked.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/program.h"
#include "nabla/scope.h"

#if defined(__SANITIZE_ADDRESS__)
#define NABLA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NABLA_TEST_ASAN 1
#endif
#endif
#if defined(NABLA_TEST_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace nabla {
namespace {

// "toy_misbehave": Out has X's shape; the kernel copies X and then, per
// `how`, also writes Out[numel] ("past"), Out[-1] ("before"), Out[0 ..
// numel * numel) ("far", as matmul's GEMM did into a too-small Out), X[0]
// ("input"), or allocates Out one element longer ("shape").
void RegisterMisbehavingOp() {
  static bool done = false;
  if (done) return;
  done = true;
  RegisterOps("checked_mode_test", [](Registrar& r) {
    r.Op("toy_misbehave", __FILE__, __LINE__)
        .Input("X", "x")
        .Output("Out", "a copy of x")
        .Attr<std::string>("how", std::string("none"), "(string, default none) the rule the kernel breaks")
        .InferShape([](InferShapeContext& c) {
          c.SetOutputShape("Out", c.InputShape("X"));
          c.SetOutputDType("Out", c.InputDType("X"));
        });
    r.Kernel(
        "toy_misbehave", DeviceType::kCPU, DType::kFloat32,
        [](const ExecutionContext& ctx) {
          const Tensor& x = ctx.Input("X");
          Tensor* out = ctx.Output("Out");
          const std::string how = ctx.Attr<std::string>("how");
          const int64_t n = x.Numel();
          if (how == "shape") out->Resize({n + 1});
          float* o = static_cast<float*>(out->Allocate(ctx.GetDevice()));
          for (int64_t i = 0; i < n; ++i) o[i] = x.Data<float>()[i];
          if (how == "past") o[n] = 1.0f;
          if (how == "before") o[-1] = 1.0f;
          if (how == "far")
            for (int64_t i = 0; i < n * n; ++i) o[i] = 2.0f;
          if (how == "input") const_cast<float*>(x.Data<float>())[0] += 1.0f;
        },
        __FILE__, __LINE__);
  });
}

class Checked : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    RegisterMisbehavingOp();
    SetCheckedMode(true);
  }
  void TearDown() override { SetCheckedMode(false); }
};

// Runs toy_misbehave(X=x) -> out once through `executor` on an x of `n`
// floats; returns the error line, or "" when the run succeeded.
std::string RunToy(const std::string& how, int64_t n, const std::string& executor = "sequential") {
  ProgramDesc program;
  program.Root()->AppendOp(OpDesc("toy_misbehave", {{"X", {"x"}}}, {{"Out", {"out"}}}, {{"how", how}}));
  Scope scope;
  float* x = scope.Var("x")->GetTensor().Allocate<float>(HostDevice(), {n});
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  try {
    CreateExecutor(executor, HostDevice(), ExecutorOptions{})->Run(program, 0, scope);
  } catch (const Error& e) {
    return e.what();
  }
  const Tensor& out = scope.FindVar("out")->GetTensor();
  EXPECT_EQ(out.GetShape(), Shape{n});
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out.Data<float>()[i], static_cast<float>(i));
  return "";
}

void ExpectOneLineNaming(const std::string& error, const std::vector<std::string>& parts) {
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  for (const std::string& p : parts) EXPECT_NE(error.find(p), std::string::npos) << "'" << p << "' not in: " << error;
}

TEST_F(Checked, AWellBehavedKernelRunsAsWithout) {
  for (const char* executor : {"sequential", "taskgraph"}) EXPECT_EQ(RunToy("none", 3, executor), "") << executor;
}

TEST_F(Checked, OneElementPastTheOutputFailsTheOp) {
  for (const char* executor : {"sequential", "taskgraph"}) {
    ExpectOneLineNaming(RunToy("past", 3, executor), {"op 'toy_misbehave'", "checked mode", "4 bytes past the end",
                                                      "output Out", "var 'out'", "inferred float32[3]"});
  }
}

TEST_F(Checked, OneElementBeforeTheOutputFailsTheOp) {
  ExpectOneLineNaming(RunToy("before", 5),
                      {"op 'toy_misbehave'", "4 bytes before the start", "output Out", "var 'out'", "float32[5]"});
}

// 16 floats end on a 64-byte boundary: the element past them lies in the
// inaccessible page, so the kernel is stopped as it writes and the process
// ends with the line. A GEMM writing a 1000 x 1000 result into an Out of
// 1000 floats (matmul's bug) is the "far" case.
TEST_F(Checked, WritingIntoTheGuardPageEndsTheProcessWithTheLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(RunToy("past", 16), ::testing::ExitedWithCode(1),
              "^nabla: error: op 'toy_misbehave': checked mode: the kernel wrote past the end of output Out \\(var "
              "'out', inferred float32\\[16\\], 64 bytes\\) into the inaccessible page after it\n$");
  EXPECT_EXIT(RunToy("far", 1000, "taskgraph"), ::testing::ExitedWithCode(1),
              "op 'toy_misbehave'.*output Out \\(var 'out', inferred float32\\[1000\\], 4000 bytes\\)");
}

TEST_F(Checked, AnOutputOfAnotherShapeThanInferredFailsTheOp) {
  ExpectOneLineNaming(RunToy("shape", 3), {"op 'toy_misbehave'", "output Out", "var 'out'", "as float32[4]",
                                           "shape inference gave float32[3]"});
}

TEST_F(Checked, WritingAnInputFailsTheOp) {
  ExpectOneLineNaming(RunToy("input", 3), {"op 'toy_misbehave'", "changed input X", "var 'x'", "only reads"});
}

// The op's checks also hold for calls outside an executor (RunOp: the
// gradient checker, eager calls).
TEST_F(Checked, RunOpChecksToo) {
  Scope scope;
  scope.Var("x")->GetTensor().Allocate<float>(HostDevice(), {3});
  OpDesc op("toy_misbehave", {{"X", {"x"}}}, {{"Out", {"out"}}}, {{"how", std::string("past")}});
  try {
    RunOp(op, scope, HostDevice(), RunContext{});
    ADD_FAILURE() << "the overrun went unnoticed";
  } catch (const Error& e) {
    ExpectOneLineNaming(e.what(), {"op 'toy_misbehave'", "past the end of output Out"});
  }
}

TEST_F(Checked, TensorsReuseOnlyBuffersOfTheirExactSize) {
  EXPECT_TRUE(ExactBuffers());
  Tensor t;
  float* a = t.Allocate<float>(HostDevice(), {4, 4});
  EXPECT_EQ(t.Allocate<float>(HostDevice(), {2, 8}), a);  // same bytes: reused
  EXPECT_NE(t.Allocate<float>(HostDevice(), {2, 4}), a);  // fewer: a new exact one
}

// ---------------------------------------------------------------- AddressSanitizer builds

#if defined(NABLA_TEST_ASAN)
TEST(AddressSanitizerBuild, HostTensorsAreExactlyTheirSize) {
  cpu::InitCpuBackend();
  ASSERT_FALSE(CheckedMode());
  EXPECT_TRUE(ExactBuffers());
  Tensor t;
  auto* p = static_cast<char*>(t.Allocate(HostDevice(), DType::kFloat32, {3}));
  EXPECT_FALSE(__asan_address_is_poisoned(p + 11));
  EXPECT_TRUE(__asan_address_is_poisoned(p + 12));
  p = static_cast<char*>(t.Allocate(HostDevice(), DType::kFloat32, {2}));  // smaller: not the old buffer
  EXPECT_FALSE(__asan_address_is_poisoned(p + 7));
  EXPECT_TRUE(__asan_address_is_poisoned(p + 8));
}

// Outside checked mode, ASan itself reports the overrun that went unseen in
// tbbmalloc's rounded blocks.
TEST(AddressSanitizerBuild, ReportsAKernelWritingOneElementPastItsOutput) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  cpu::InitCpuBackend();
  RegisterMisbehavingOp();
  ASSERT_FALSE(CheckedMode());
  EXPECT_DEATH(RunToy("past", 3), "heap-buffer-overflow");
}
#else
TEST(AddressSanitizerBuild, HostTensorsAreExactlyTheirSize) {
  GTEST_SKIP() << "not an AddressSanitizer build (scripts/build.sh -DNABLA_SANITIZE=address)";
}
#endif

}  // namespace
}  // namespace nabla
