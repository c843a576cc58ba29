#include <gtest/gtest.h>

#include "nabla/checked.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/scope.h"
#include "toy_ops.h"

namespace nabla {
namespace {

void Feed(Scope& scope, const std::string& name, std::vector<float> values) {
  Tensor& t = scope.Var(name)->GetTensor();
  float* p = t.Allocate<float>(HostDevice(), {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), p);
}

std::vector<float> Fetch(Scope& scope, const std::string& name) {
  const Tensor& t = scope.FindVar(name)->GetTensor();
  return std::vector<float>(t.Data<float>(), t.Data<float>() + t.Numel());
}

// Two independent branches joined at the end, plus a write-after-read on `a`.
ProgramDesc DiamondProgram() {
  ProgramDesc p;
  BlockDesc* b = p.Root();
  b->AppendOp(OpDesc("toy_scale", {{"X", {"a"}}}, {{"Out", {"l1"}}}, {{"scale", 2.0f}}));
  b->AppendOp(OpDesc("toy_scale", {{"X", {"l1"}}}, {{"Out", {"l2"}}}, {{"scale", 3.0f}}));
  b->AppendOp(OpDesc("toy_scale", {{"X", {"a"}}}, {{"Out", {"r1"}}}, {{"scale", -1.0f}}));
  b->AppendOp(OpDesc("toy_add", {{"X", {"l2"}}, {"Y", {"r1"}}}, {{"Out", {"out"}}}, {}));
  // Overwrites an input read above: must wait for both readers of `a`.
  b->AppendOp(OpDesc("toy_scale", {{"X", {"out"}}}, {{"Out", {"a"}}}, {{"scale", 10.0f}}));
  return p;
}

class ExecutorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    testing::RegisterToyOps();
  }
};

TEST_P(ExecutorTest, DiamondGivesTheSequentialResult) {
  ProgramDesc p = DiamondProgram();
  ExecutorOptions opts;
  opts.threads = 2;
  auto exec = CreateExecutor(GetParam(), HostDevice(), opts);
  Scope scope;
  Feed(scope, "a", {1, 2, 3});
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "out"), (std::vector<float>{5, 10, 15}));
  EXPECT_EQ(Fetch(scope, "a"), (std::vector<float>{50, 100, 150}));
  // The cached graph is reused: a second step continues from the new `a`.
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "out"), (std::vector<float>{250, 500, 750}));
}

TEST_P(ExecutorTest, OpFailureNamesTheOp) {
  ProgramDesc p;
  p.SetSourceFile("prog.yaml");
  OpDesc op("toy_add", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"c"}}}, {});
  op.SetPos({7, 9});
  p.Root()->AppendOp(op);
  auto exec = CreateExecutor(GetParam(), HostDevice());
  Scope scope;
  Feed(scope, "a", {1, 2});
  Feed(scope, "b", {1, 2, 3});
  try {
    exec->Run(p, 0, scope);
    FAIL() << "shape mismatch not reported";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("prog.yaml:7:9: op 'toy_add': toy_add shapes differ: [2] vs [3]", 0), 0u) << msg;
  }
}

TEST_P(ExecutorTest, MissingKernelIsUnimplementedAndListsKernels) {
  ProgramDesc p;
  p.Root()->AppendOp(OpDesc("toy_scale", {{"X", {"a"}}}, {{"Out", {"b"}}}, {{"scale", 1.0f}}));
  Scope scope;
  double* d = scope.Var("a")->GetTensor().Allocate<double>(HostDevice(), {2});
  d[0] = d[1] = 1;
  auto exec = CreateExecutor(GetParam(), HostDevice());
  try {
    exec->Run(p, 0, scope);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("no kernel for (cpu, float64); registered kernels: cpu/float32"),
              std::string::npos)
        << e.what();
  }
}

// Runtime shape inference is skipped while an op's inputs and outputs keep
// the shapes it last saw (PreparedOp::ShapeMemo): a new input shape, an
// output resized by someone else, or a changed op must each bring it back.
TEST_P(ExecutorTest, ShapeInferenceRerunsWhenInputsOutputsOrTheOpChange) {
  ProgramDesc p;
  p.Root()->AppendOp(OpDesc("toy_add", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"c"}}}, {}));
  p.Root()->AppendOp(OpDesc("toy_tile", {{"X", {"c"}}}, {{"Out", {"d"}}}, {{"times", 2}}));
  auto exec = CreateExecutor(GetParam(), HostDevice());
  Scope scope;
  Feed(scope, "a", {1, 2, 3});
  Feed(scope, "b", {10, 20, 30});
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "d"), (std::vector<float>{11, 22, 33, 11, 22, 33}));
  exec->Run(p, 0, scope);  // the memo holds
  EXPECT_EQ(Fetch(scope, "d"), (std::vector<float>{11, 22, 33, 11, 22, 33}));

  Feed(scope, "a", {1, 2});
  Feed(scope, "b", {5, 5});
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "c"), (std::vector<float>{6, 7}));
  EXPECT_EQ(Fetch(scope, "d"), (std::vector<float>{6, 7, 6, 7}));

  scope.FindVar("c")->GetTensor().Resize({1});
  scope.FindVar("d")->GetTensor().Resize({1});
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "d"), (std::vector<float>{6, 7, 6, 7}));

  p.Root()->Op(1)->SetAttr("times", 3);
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "d"), (std::vector<float>{6, 7, 6, 7, 6, 7}));

  // Inputs that no longer agree are still refused.
  Feed(scope, "a", {1, 2, 3});
  try {
    exec->Run(p, 0, scope);
    FAIL() << "shape mismatch not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("toy_add shapes differ: [3] vs [2]"), std::string::npos) << e.what();
  }
}

// Kernels read the vars the executor resolved when it prepared the block:
// an op renamed in place, or replaced by another, between runs must read
// and write its new vars.
TEST_P(ExecutorTest, AnOpRenamedOrReplacedBetweenRunsUsesItsNewVars) {
  ProgramDesc p;
  p.Root()->AppendOp(OpDesc("toy_add", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"c"}}}, {}));
  auto exec = CreateExecutor(GetParam(), HostDevice());
  Scope scope;
  Feed(scope, "a", {1, 2});
  Feed(scope, "b", {10, 20});
  Feed(scope, "e", {100, 200});
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "c"), (std::vector<float>{11, 22}));
  p.Root()->Op(0)->RenameInput("b", "e");
  p.Root()->Op(0)->RenameOutput("c", "f");
  exec->Run(p, 0, scope);
  EXPECT_EQ(Fetch(scope, "f"), (std::vector<float>{101, 202}));
  EXPECT_EQ(Fetch(scope, "c"), (std::vector<float>{11, 22}));

  // A new op assigned over an op never changed itself: same address, and
  // neither was ever mutated, yet the block is stale (versions are unique).
  ProgramDesc q;
  q.Root()->AppendOp(OpDesc("toy_add", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"h"}}}, {}));
  exec->Run(q, 0, scope);
  EXPECT_EQ(Fetch(scope, "h"), (std::vector<float>{11, 22}));
  *q.Root()->Op(0) = OpDesc("toy_add", {{"X", {"e"}}, {"Y", {"e"}}}, {{"Out", {"g"}}}, {});
  exec->Run(q, 0, scope);
  ASSERT_NE(scope.FindVar("g"), nullptr);
  EXPECT_EQ(Fetch(scope, "g"), (std::vector<float>{200, 400}));
}

INSTANTIATE_TEST_SUITE_P(Both, ExecutorTest, ::testing::Values("sequential", "taskgraph"));

TEST(ExecutorFactory, UnknownNameListsKnownOnes) {
  cpu::InitCpuBackend();
  try {
    CreateExecutor("warp", HostDevice());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of: sequential, taskgraph"), std::string::npos) << e.what();
  }
}

TEST(Scope, LookupWalksUpAndKidsAreOwned) {
  Scope root;
  root.Var("w");
  Scope& kid = root.NewScope();
  kid.Var("h");
  EXPECT_EQ(kid.FindVar("w"), root.FindVar("w"));
  EXPECT_EQ(root.FindVar("h"), nullptr);
  EXPECT_EQ(kid.FindLocalVar("w"), nullptr);
}

// An unknown dim (-1) makes the count unknown even beside a 0; a 0 makes it
// 0 even where the other dims would overflow; an overflow is an error.
TEST(Shape, NumElementsOrdersUnknownZeroAndOverflow) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({0, -1}), -1);
  EXPECT_EQ(NumElements({int64_t{1} << 62, int64_t{1} << 62, 0}), 0);
  EXPECT_EQ(NumElements({int64_t{1} << 62, -1, int64_t{1} << 62}), -1);
  try {
    NumElements({int64_t{1} << 40, int64_t{1} << 40});
    FAIL() << "overflow not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has more elements than a 64-bit count holds"), std::string::npos);
  }
}

TEST(Tensor, AllocateReusesBufferAndChecksDType) {
  cpu::InitCpuBackend();
  Tensor t;
  float* a = t.Allocate<float>(HostDevice(), {4, 4});
  float* b = t.Allocate<float>(HostDevice(), {2, 4});
  if (ExactBuffers()) {
    EXPECT_NE(a, b);  // ASan builds: an exact buffer, so ASan sees a write past its end
  } else {
    EXPECT_EQ(a, b);  // smaller: same buffer
  }
  EXPECT_THROW(t.Data<double>(), Error);
  Tensor shared;
  shared.ShareDataWith(t);
  float* c = t.Allocate<float>(HostDevice(), {2, 4});  // shared: must not clobber
  EXPECT_NE(c, shared.Data<float>());
}

}  // namespace
}  // namespace nabla
