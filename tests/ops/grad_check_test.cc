// The GradCheck harness itself, on toy ops registered in-process: it must
// accept a right gradient and reject a wrong or missing one. The per-op
// checks are the op table's GradCheck.<op> tests (op_table_test.cc).
#include "nabla/gradcheck.h"
#include "op_test_util.h"

namespace nabla::op_test {
namespace {

// ---------------------------------------------------------------- the harness itself

// Toy ops registered in-process: `toy_cube` with a right gradient, one with
// a wrong gradient, and one with a gradient but no check case.
template <bool kRight>
void CubeGrad(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const double* xd = x.Data<double>();
  const double* dout = ctx.Input("Out@GRAD").Data<double>();
  Tensor* dx = ctx.Output("X@GRAD");
  double* g = dx->Allocate<double>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) g[i] = dout[i] * (kRight ? 3.0 : 2.9) * xd[i] * xd[i];
}

void Cube(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const double* xd = x.Data<double>();
  double* o = ctx.Output("Out")->Allocate<double>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) o[i] = xd[i] * xd[i] * xd[i];
}

void RegisterToyCube(Registrar& r, const std::string& type, bool right, bool with_case) {
  GradCheckSpec spec;
  spec.name = "vector";
  GradCheckInput in;
  in.slot = "X";
  in.shape = {4};
  spec.inputs = {in};
  OpBuilder& b = r.Op(type)
                     .Input("X", "x")
                     .Output("Out", "x^3")
                     .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
                     .GradMaker<DefaultGradOpDescMaker>();
  if (with_case) b.GradCheck(spec);
  r.DefaultGradOp(type).InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "X@GRAD"); });
  r.Kernel(type, DeviceType::kCPU, DType::kFloat64, Cube);
  r.Kernel(type + "_grad", DeviceType::kCPU, DType::kFloat64, right ? CubeGrad<true> : CubeGrad<false>);
}

void RegisterToys() {
  static bool done = false;
  if (done) return;
  done = true;
  RegisterOps("gradcheck_toys", [](Registrar& r) {
    RegisterToyCube(r, "toy_cube", true, true);
    RegisterToyCube(r, "toy_bad_cube", false, true);
    RegisterToyCube(r, "toy_uncovered_cube", true, false);
  });
}

TEST(GradCheckHarness, AcceptsARightGradient) {
  RegisterToys();
  std::vector<GradCheckResult> results = CheckOpGradients("toy_cube", HostDevice());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok) << (results[0].failures.empty() ? "" : results[0].failures[0]);
  EXPECT_LT(results[0].max_error, 1e-6);
}

TEST(GradCheckHarness, RejectsAWrongGradient) {
  RegisterToys();
  std::vector<GradCheckResult> results = CheckOpGradients("toy_bad_cube", HostDevice());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok);
  ASSERT_EQ(results[0].failures.size(), 1u);
  EXPECT_NE(results[0].failures[0].find("x0"), std::string::npos) << results[0].failures[0];
  // 2.9 instead of 3: off by a third of a tenth.
  EXPECT_NEAR(results[0].max_error, 0.1 / 3.0, 0.01);
}

TEST(GradCheckHarness, AnOpWithAGradientNeedsACase) {
  RegisterToys();
  std::vector<GradCheckResult> results = CheckOpGradients("toy_uncovered_cube", HostDevice());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok);
  EXPECT_NE(results[0].failures[0].find("no GradCheck case"), std::string::npos) << results[0].failures[0];
}

TEST(GradCheckHarness, OpsWithoutGradientHaveNothingToCheck) {
  EXPECT_TRUE(CheckOpGradients("fill_constant", HostDevice()).empty());
  EXPECT_TRUE(CheckOpGradients("uniform_random", HostDevice()).empty());
}

TEST(GradCheckHarness, UncheckedInputsGetNoGradient) {
  // mul's only_x case leaves Y unchecked: the harness passes Y in the no-grad
  // set, so mul_grad runs with Y@GRAD = @EMPTY@ and must skip it.
  GradCheckSpec spec;
  spec.name = "only_x";
  GradCheckInput x, y;
  x.slot = "X";
  x.shape = {2, 3};
  y.slot = "Y";
  y.shape = {3, 2};
  y.check = false;
  spec.inputs = {x, y};
  GradCheckResult r = CheckGradient("mul", spec, HostDevice());
  EXPECT_TRUE(r.ok) << (r.failures.empty() ? "" : r.failures[0]);
}

}  // namespace
}  // namespace nabla::op_test
