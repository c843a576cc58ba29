// Random ops and initializers: shape and dtype from attributes, values in
// range with the right moments, and the same tensor for the same seed; and
// dropout's masks. They have no row in the op table (op_table_test.cc's kNoRow).
#include <cmath>

#include "op_test_util.h"

namespace nabla::op_test {
namespace {

struct Moments {
  double min = 1e300, max = -1e300, mean = 0, std = 0;
};

Moments Of(const HostTensor& t) {
  Moments m;
  for (double v : t.v) {
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
    m.mean += v;
  }
  m.mean /= static_cast<double>(t.v.size());
  for (double v : t.v) m.std += (v - m.mean) * (v - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(t.v.size()));
  return m;
}

HostTensor Draw(const std::string& type, AttributeMap attrs, DType dtype, uint64_t run_seed = 0) {
  OpRun run;
  run.type = type;
  run.attrs = std::move(attrs);
  run.attrs["dtype"] = std::string(DTypeName(dtype));
  run.seed = run_seed;
  std::vector<DType> dtypes;
  HostTensor t = run.Run(&dtypes).at(0);
  EXPECT_EQ(dtypes.at(0), dtype);
  return t;
}

class RandomOps : public ::testing::TestWithParam<DType> {};

TEST_P(RandomOps, UniformRandomStaysInRangeWithUniformMoments) {
  HostTensor t = Draw("uniform_random",
                      {{"shape", std::vector<int>{100, 200}}, {"min", -2.0f}, {"max", 3.0f}, {"seed", 7}}, GetParam());
  ASSERT_EQ(t.shape, (Shape{100, 200}));
  Moments m = Of(t);
  EXPECT_GE(m.min, -2.0);
  EXPECT_LT(m.max, 3.0);
  EXPECT_NEAR(m.mean, 0.5, 0.05);
  EXPECT_NEAR(m.std, 5.0 / std::sqrt(12.0), 0.03);
}

// Paddle's diagonal: element i * diag_step + i is diag_val for i < diag_num;
// every other element is the one the same seed draws without a diagonal.
TEST_P(RandomOps, UniformRandomDiagonalOverwritesOnlyItsElements) {
  AttributeMap a = {{"shape", std::vector<int>{4, 5}}, {"seed", 9}};
  const HostTensor plain = Draw("uniform_random", a, GetParam());
  a["diag_num"] = 3;
  a["diag_step"] = 6;
  a["diag_val"] = 7.0f;
  const HostTensor diag = Draw("uniform_random", a, GetParam());
  ASSERT_EQ(diag.v.size(), plain.v.size());
  for (size_t i = 0; i < diag.v.size(); ++i) {
    if (i == 0 || i == 7 || i == 14)
      EXPECT_EQ(diag.v[i], 7.0) << i;
    else
      EXPECT_EQ(diag.v[i], plain.v[i]) << i;
  }
  // The last diagonal element, (diag_num - 1) * (diag_step + 1) = 21, lies
  // past the 20 elements: an error naming the attributes, not a write.
  a["diag_num"] = 4;
  OpRun run;
  run.type = "uniform_random";
  run.attrs = a;
  run.attrs["dtype"] = std::string(DTypeName(GetParam()));
  try {
    run.Run();
    ADD_FAILURE() << "a diagonal past Out was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("diag_num 4 and diag_step 6"), std::string::npos) << e.what();
  }
}

TEST_P(RandomOps, GaussianRandomHasItsMeanAndStd) {
  HostTensor t = Draw("gaussian_random",
                      {{"shape", std::vector<int>{20000}}, {"mean", 1.5f}, {"std", 0.5f}, {"seed", 3}}, GetParam());
  Moments m = Of(t);
  EXPECT_NEAR(m.mean, 1.5, 0.02);
  EXPECT_NEAR(m.std, 0.5, 0.02);
}

TEST_P(RandomOps, SameSeedSameTensorOtherSeedOtherTensor) {
  AttributeMap a = {{"shape", std::vector<int>{64}}, {"seed", 11}};
  HostTensor first = Draw("uniform_random", a, GetParam());
  EXPECT_EQ(first.v, Draw("uniform_random", a, GetParam()).v);
  a["seed"] = 12;
  EXPECT_NE(first.v, Draw("uniform_random", a, GetParam()).v);
  // seed 0 derives the seed from the run's: reproducible per run seed.
  a["seed"] = 0;
  EXPECT_EQ(Draw("gaussian_random", a, GetParam(), 5).v, Draw("gaussian_random", a, GetParam(), 5).v);
  EXPECT_NE(Draw("gaussian_random", a, GetParam(), 5).v, Draw("gaussian_random", a, GetParam(), 6).v);
}

// fan_in = shape[0] and fan_out = shape[1] for nabla's [in, out] weights.
TEST_P(RandomOps, XavierUniformBoundUsesBothFans) {
  HostTensor t = Draw("xavier_uniform", {{"shape", std::vector<int>{300, 100}}, {"seed", 1}}, GetParam());
  double limit = std::sqrt(6.0 / 400.0);
  Moments m = Of(t);
  EXPECT_GE(m.min, -limit);
  EXPECT_LT(m.max, limit);
  EXPECT_GT(m.max, 0.95 * limit);
  EXPECT_NEAR(m.std, limit / std::sqrt(3.0), 0.01 * limit);
}

TEST_P(RandomOps, XavierNormalStdWithGain) {
  HostTensor t =
      Draw("xavier_normal", {{"shape", std::vector<int>{300, 100}}, {"seed", 2}, {"gain", 2.0f}}, GetParam());
  EXPECT_NEAR(Of(t).std, 2.0 * std::sqrt(2.0 / 400.0), 0.002);
}

TEST_P(RandomOps, KaimingUniformUsesFanIn) {
  HostTensor t = Draw("kaiming_uniform", {{"shape", std::vector<int>{50, 400}}, {"seed", 4}}, GetParam());
  double bound = std::sqrt(6.0 / 50.0);
  Moments m = Of(t);
  EXPECT_GE(m.min, -bound);
  EXPECT_LT(m.max, bound);
  EXPECT_GT(m.max, 0.95 * bound);
}

TEST_P(RandomOps, KaimingNormalFanOutAndConvFans) {
  HostTensor t =
      Draw("kaiming_normal", {{"shape", std::vector<int>{50, 400}}, {"seed", 5}, {"mode", std::string("fan_out")}},
           GetParam());
  EXPECT_NEAR(Of(t).std, std::sqrt(2.0 / 400.0), 0.002);
  // A conv filter [out 8, in 4, 5, 5]: fan_in = 4 * 25.
  HostTensor c = Draw("kaiming_normal", {{"shape", std::vector<int>{8, 4, 5, 5}}, {"seed", 6}}, GetParam());
  EXPECT_NEAR(Of(c).std, std::sqrt(2.0 / 100.0), 0.01);
}

// dropout (moved from the nn harness): the mask's rate, both scalings, the
// seed, inference mode, and p = 1 without 0 * inf = NaN when upscaling.
TEST_P(RandomOps, DropoutBothImplementations) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::kFloat32 ? 1e-6 : 1e-12;
  std::mt19937_64 rng(9);
  // Never 0, so dropped outputs are recognisable.
  const HostTensor x = RandomTensor({200, 100}, dtype, 0.5, 1.5, rng);
  // {Out, Mask}; inference writes no Mask.
  auto drop = [&](AttributeMap attrs) {
    OpRun run;
    run.type = "dropout";
    run.inputs = {{"X", {x}}};
    run.input_dtypes = {dtype};
    const bool is_test = attrs.count("is_test") && std::get<bool>(attrs.at("is_test"));
    run.attrs = std::move(attrs);
    if (is_test) {
      run.outputs = {{"Out", 1}};
      return run.Run();
    }
    run.outputs = {{"Out", 1}, {"Mask", 1}};
    std::vector<HostTensor> out = run.Run();  // in slot name order: Mask, Out
    return std::vector<HostTensor>{out.at(1), out.at(0)};
  };
  const float p = 0.3f;
  for (const std::string impl : {"downgrade_in_infer", "upscale_in_train"}) {
    AttributeMap attrs{{"dropout_prob", p}, {"dropout_implementation", impl}, {"fix_seed", true}, {"seed", 5}};
    std::vector<HostTensor> out = drop(attrs);
    const HostTensor &y = out[0], &m = out[1];
    const double scale = impl == "upscale_in_train" ? 1.0 / (1.0 - p) : 1.0;
    int64_t kept = 0;
    for (int64_t i = 0; i < x.Numel(); ++i) {
      ASSERT_TRUE(m.v[i] == 0.0 || m.v[i] == 1.0) << m.v[i];
      kept += m.v[i] == 1.0;
      ASSERT_NEAR(y.v[i], x.v[i] * m.v[i] * scale, tol * 4) << impl << " " << i;
    }
    // Binomial(20000, 0.7): sd ~ 65, so 5 sd is 325.
    EXPECT_NEAR(static_cast<double>(kept), 0.7 * static_cast<double>(x.Numel()), 325.0) << impl;
    // The same seed gives the same mask; a different one another mask.
    EXPECT_EQ(drop(attrs)[1].v, m.v);
    attrs["seed"] = 6;
    EXPECT_NE(drop(attrs)[1].v, m.v);
    attrs["is_test"] = true;
    const HostTensor yt = drop(attrs)[0];
    const double test_scale = impl == "upscale_in_train" ? 1.0 : 1.0 - p;
    for (int64_t i = 0; i < x.Numel(); i += 997) EXPECT_NEAR(yt.v[i], x.v[i] * test_scale, tol * 4);
  }
  const HostTensor all = drop({{"dropout_prob", 1.0f}, {"dropout_implementation", std::string("upscale_in_train")}})[0];
  for (double v : all.v) ASSERT_EQ(v, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Floats, RandomOps, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(DTypeName(i.param)); });

TEST(RandomOps, AreMarkedRandom) {
  for (const char* op :
       {"uniform_random", "gaussian_random", "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal"})
    EXPECT_TRUE(CurrentRegistry()->Get(op).traits.random) << op;
}

}  // namespace
}  // namespace nabla::op_test
