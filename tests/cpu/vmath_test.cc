// The CPU backend's vector math against the plain loops it replaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/cpu/simd.h"
#include "nabla/cpu/vmath.h"

namespace nabla::cpu {
namespace {

// Bit for bit the left-to-right sum, across the 4-input passes, the leftover
// inputs and the 1024-element blocks (and with -0.0, inf and NaN about).
TEST(SumArrays, AddsInOrderBitForBit) {
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.0f, 1e3f);
  for (int64_t count : {1, 2, 3, 4, 5, 8, 9, 32})
    for (int64_t n : {1, 7, 1023, 1024, 1025, 5000}) {
      std::vector<std::vector<float>> xs(count, std::vector<float>(n));
      for (auto& x : xs)
        for (auto& v : x) v = d(gen);
      xs[0][0] = -0.0f;
      if (count > 2 && n > 3) {
        xs[1][1] = INFINITY;
        xs[2][2] = NAN;
        xs[count - 1][3] = -INFINITY;
      }
      std::vector<const float*> ptrs;
      for (const auto& x : xs) ptrs.push_back(x.data());
      std::vector<float> got(n, 123.0f), want(n);
      for (int64_t i = 0; i < n; ++i) {
        float s = xs[0][i];
        for (int64_t j = 1; j < count; ++j) s += xs[j][i];
        want[i] = s;
      }
      SumArrays(ptrs.data(), count, got.data(), n);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << count << " inputs of " << n;
    }
}

// The float64 formulas the vector code approximates, in forms that do not
// cancel in the left tail ((1 + tanh u) / 2 is 1 / (1 + exp(-2u)), which
// float64 resolves far past where 1 + tanh(u) rounds to 0).
double TanhFormCdf(double x) { return 1 / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

double GeluRef(double x, bool approximate) {
  if (approximate) return x * TanhFormCdf(x);
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
}

// The gradient is a sum of two terms that cancel near x = -0.75 (its zero);
// *magnitude gets the sum of their sizes, the scale its error is judged by.
double GeluGradRef(double x, bool approximate, double* magnitude) {
  double a, b;
  if (approximate) {
    const double s = TanhFormCdf(x);
    a = s;
    b = 2 * x * s * (1 - s) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
  } else {
    a = 0.5 * std::erfc(-x / std::sqrt(2.0));
    b = x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  }
  *magnitude = std::abs(a) + std::abs(b);
  return a + b;
}

// Every float32 input on a fine grid over [-20, 20] (the far tails, where
// gelu underflows, included), plus zero, signed zero and tiny values, at
// lengths that exercise the vector loop's remainder: within 2e-6 relative
// error of the float64 formulas (the gradient's relative to its terms), growing with x^2 in the far left tail
// (exp(-x^2 / 2) inherits the rounding of x^2 / 2: 1.3e-5 at x = -11.6,
// where gelu is -1.6e-30), wherever the value is above float's subnormals.
// Neither form computes 1 + erf or 1 + tanh, which cancel in the left tail
// (float32 1 + tanh is 1e-4 off at x = -3).
TEST(Gelu, MatchesTheFloat64FormulasTailsIncluded) {
  std::vector<float> x;
  for (double v = -20; v <= 20; v += 1.0 / 512) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 3e-8f, -3e-8f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> dy(x.size());
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  for (auto& v : dy) v = d(gen);
  for (bool approximate : {false, true}) {
    std::vector<float> y(x.size()), dx(x.size());
    Gelu(x.data(), y.data(), n, approximate);
    GeluGrad(x.data(), dy.data(), dx.data(), n, approximate);
    double worst_y = 0, worst_dx = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_FALSE(std::isnan(y[i]) || std::isnan(dx[i])) << x[i];
      double magnitude;
      const double want_y = GeluRef(x[i], approximate), want_dx = dy[i] * GeluGradRef(x[i], approximate, &magnitude);
      // Where float32 underflows, the absolute error is what counts.
      const double bound = 2e-6 + 3e-7 * x[i] * x[i];
      worst_y = std::max(worst_y, std::abs(y[i] - want_y) / std::max(std::abs(want_y), 1e-30) / bound);
      worst_dx = std::max(worst_dx, std::abs(dx[i] - want_dx) / std::max(std::abs(dy[i]) * magnitude, 1e-30) / bound);
    }
    EXPECT_LT(worst_y, 1) << "approximate " << approximate << ": the worst error over its bound";
    EXPECT_LT(worst_dx, 1) << "approximate " << approximate << ": the worst error over its bound";
  }
  // Signed zero in, signed zero out; exact at 0.
  std::vector<float> z = {0.0f, -0.0f}, zy(2);
  Gelu(z.data(), zy.data(), 2, false);
  EXPECT_EQ(zy[0], 0.0f);
  EXPECT_EQ(zy[1], 0.0f);
}

// The row kernels of softmax and layer_norm against float64 loops, on row
// lengths below, at and around the 16 lanes (the tails), with rows far from
// zero and masked (-1e9) entries.
std::vector<float> RandomRow(std::mt19937& gen, int64_t n, float center, float spread) {
  std::normal_distribution<float> d(center, spread);
  std::vector<float> x(n);
  for (auto& v : x) v = d(gen);
  return x;
}

const int64_t kRowLengths[] = {1, 5, 15, 16, 17, 33, 128, 300};

TEST(RowKernels, SoftmaxPiecesMatchFloat64) {
  std::mt19937 gen(3);
  for (int64_t n : kRowLengths) {
    std::vector<float> x = RandomRow(gen, n, 0.0f, 3.0f);
    if (n > 4) x[n / 2] = -1e9f;  // a masked score: exactly 0 after exp
    const float m = RowMax(x.data(), n);
    double want_max = x[0];
    for (float v : x) want_max = std::max<double>(want_max, v);
    ASSERT_EQ(m, static_cast<float>(want_max)) << n;
    std::vector<float> y(n);
    const float sum = ExpShiftedSum(x.data(), m, y.data(), n);
    double want_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp(static_cast<double>(x[i]) - m);
      want_sum += e;
      EXPECT_NEAR(y[i], e, 2e-7 * std::max(1.0, e)) << n << ", " << i;
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << n;
    if (n > 4) {
      EXPECT_EQ(y[n / 2], 0.0f);
    }
    ScaleRow(y.data(), 1.0f / sum, n);
    std::vector<float> dy = RandomRow(gen, n, 0.0f, 1.0f), dx(n);
    double dot = 0.0;
    for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(y[i]) * dy[i];
    EXPECT_NEAR(DotRow(y.data(), dy.data(), n), dot, 1e-6 * (1.0 + std::abs(dot))) << n;
    SoftmaxGradRow(y.data(), dy.data(), dx.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(dx[i], y[i] * (dy[i] - dot), 1e-6) << n << ", " << i;
  }
}

TEST(RowKernels, LayerNormMatchesFloat64) {
  std::mt19937 gen(5);
  for (float center : {0.0f, 1000.0f})
    for (int64_t n : kRowLengths) {
      const std::vector<float> x = RandomRow(gen, n, center, 1.5f), scale = RandomRow(gen, n, 1.0f, 0.3f),
                               bias = RandomRow(gen, n, 0.0f, 1.0f), dy = RandomRow(gen, n, 0.0f, 1.0f);
      const float eps = 1e-5f;
      double mean = 0.0, var = 0.0;
      for (float v : x) mean += v;
      mean /= n;
      for (float v : x) var += (v - mean) * (v - mean);
      var /= n;
      const double rstd = 1.0 / std::sqrt(var + eps);
      for (bool affine : {false, true}) {
        std::vector<float> y(n);
        float m = 0, v = 0;
        LayerNormRow(x.data(), n, affine ? scale.data() : nullptr, affine ? bias.data() : nullptr, eps, y.data(), &m,
                     &v);
        EXPECT_NEAR(m, mean, 1e-6 * std::max(1.0, std::abs(mean))) << n << " at " << center;
        EXPECT_NEAR(v, var, 1e-5 * std::max(1.0, var)) << n << " at " << center;
        for (int64_t i = 0; i < n; ++i) {
          double want = (x[i] - mean) * rstd;
          if (affine) want = want * scale[i] + bias[i];
          // x - mean in float32 is off by x's rounding, about 1e-4 at 1000.
          EXPECT_NEAR(y[i], want, (center == 0.0f ? 2e-6 : 2e-4) * (1.0 + std::abs(want))) << n << ", " << i;
        }
        // The gradient from the saved mean and rstd.
        std::vector<float> dx(n), dscale(n, 0.5f), dbias(n, 0.25f);
        LayerNormGradRow(x.data(), dy.data(), n, m, static_cast<float>(rstd), affine ? scale.data() : nullptr,
                         dx.data(), dscale.data(), dbias.data());
        double mg = 0.0, mgx = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const double g = affine ? static_cast<double>(dy[i]) * scale[i] : dy[i];
          mg += g;
          mgx += g * (x[i] - m) * rstd;
        }
        mg /= n;
        mgx /= n;
        for (int64_t i = 0; i < n; ++i) {
          const double xhat = (x[i] - m) * rstd;
          const double g = affine ? static_cast<double>(dy[i]) * scale[i] : dy[i];
          EXPECT_NEAR(dx[i], rstd * (g - mg - xhat * mgx), 2e-5 * rstd * (1.0 + std::abs(g))) << n << ", " << i;
          EXPECT_NEAR(dscale[i], 0.5 + dy[i] * xhat, 1e-5 * (1.0 + std::abs(dy[i] * xhat))) << n << ", " << i;
          EXPECT_EQ(dbias[i], 0.25f + dy[i]) << n << ", " << i;
        }
      }
    }
}

// ---------------------------------------------------------------- vector levels

// Sets a vector level for one scope, then restores the one before.
class SimdLevelScope {
 public:
  explicit SimdLevelScope(SimdLevel level) : saved_(ActiveSimdLevel()) { SetSimdLevel(level); }
  ~SimdLevelScope() { SetSimdLevel(saved_); }

 private:
  SimdLevel saved_;
};

// The levels this CPU runs, baseline first.
std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kBaseline, SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (static_cast<int>(l) <= static_cast<int>(SupportedSimdLevel())) out.push_back(l);
  return out;
}

TEST(SimdLevel, SetClampsToWhatTheCpuRuns) {
  SimdLevelScope scope(SimdLevel::kBaseline);
  EXPECT_EQ(ActiveSimdLevel(), SimdLevel::kBaseline);
  EXPECT_EQ(SetSimdLevel(SimdLevel::kAvx512), SupportedSimdLevel());
  EXPECT_EQ(ActiveSimdLevel(), SupportedSimdLevel());
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx2), "avx2");
#if defined(__x86_64__)
  EXPECT_EQ(SupportedSimdLevel() >= SimdLevel::kAvx2, static_cast<bool>(__builtin_cpu_supports("avx2")));
#endif
}

// Values every kernel below meets: normal, huge, tiny, subnormal, signed
// zeros, infinities, NaN, at a length that leaves a remainder after every
// vector width.
std::vector<float> EdgeValues(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(gen);
  const float special[] = {0.0f,    -0.0f, 1e-40f,   -1e-42f,   1e-30f, 88.5f,
                           -100.0f, 3e38f, INFINITY, -INFINITY, NAN,    0.0003f};
  for (size_t i = 0; i < sizeof special / sizeof *special && i < x.size(); ++i) x[i * 7 % x.size()] = special[i];
  return x;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Each vector level computes every kernel of vmath.h and cpu.h to the
// baseline's bits (no FMA contraction, fixed lane orders).
TEST(SimdLevel, EveryLevelGivesTheBaselinesBits) {
  const int64_t n = 1000 + 37;
  const std::vector<float> x = EdgeValues(n, 1), dy = EdgeValues(n, 2), scale = EdgeValues(n, 3);
  std::vector<float> xs_pos(n);  // finite inputs for the row kernels
  for (int64_t i = 0; i < n; ++i) xs_pos[i] = std::isfinite(x[i]) && std::abs(x[i]) < 1e3f ? x[i] : 0.5f;
  auto run = [&](SimdLevel level) {
    SimdLevelScope scope(level);
    std::vector<std::vector<float>> out;
    auto buf = [&] { return std::vector<float>(n, 0.0f); };
    for (bool approximate : {false, true}) {
      auto y = buf(), g = buf();
      Gelu(x.data(), y.data(), n, approximate);
      GeluGrad(x.data(), dy.data(), g.data(), n, approximate);
      out.push_back(y);
      out.push_back(g);
    }
    auto t = buf(), e = buf(), es = buf(), sm = buf(), ln = buf(), lg = buf(), ds = buf(), db = buf();
    Tanh(x.data(), t.data(), n);
    ExpShifted(x.data(), 1.5f, e.data(), n);
    const float m = RowMax(xs_pos.data(), n);
    const float sum = ExpShiftedSum(xs_pos.data(), m, es.data(), n);
    ScaleRow(es.data(), 1.0f / sum, n);
    SoftmaxGradRow(es.data(), xs_pos.data(), sm.data(), n);
    float mean = 0, var = 0;
    LayerNormRow(xs_pos.data(), n, scale.data(), xs_pos.data(), 1e-5f, ln.data(), &mean, &var);
    LayerNormGradRow(xs_pos.data(), xs_pos.data(), n, mean, 1.0f / std::sqrt(var + 1e-5f), scale.data(), lg.data(),
                     ds.data(), db.data());
    const float* xs[] = {x.data(), dy.data(), scale.data(), x.data(), dy.data()};
    auto summed = buf();
    SumArrays(xs, 5, summed.data(), n);
    out.insert(out.end(), {t, e, es, sm, ln, lg, ds, db, summed});
    out.push_back({m, sum, DotRow(x.data(), dy.data(), n), mean, var});
    std::vector<bfloat16> b(n);
    ConvertToBf16(x.data(), b.data(), n);
    auto back = buf();
    ConvertFromBf16(b.data(), back.data(), n);
    out.push_back(back);
    return out;
  };
  const auto base = run(SimdLevel::kBaseline);
  for (SimdLevel level : Levels()) {
    const auto got = run(level);
    ASSERT_EQ(got.size(), base.size());
    for (size_t k = 0; k < base.size(); ++k)
      EXPECT_TRUE(SameBits(got[k], base[k])) << "output " << k << " at " << SimdLevelName(level);
  }
}

// float32 -> bfloat16 at every level is FloatToBf16 bit for bit: ties to
// even, NaNs quiet, subnormals rounded (AVX512-BF16's own instruction reads
// them as zero and is bypassed for them), every length's remainder.
TEST(SimdLevel, Bf16ConversionsRoundToNearestEvenAtEveryLevel) {
  std::vector<float> x = EdgeValues(4099, 5);
  const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x00008000u, 0x00018000u,
                               0x7f7fffffu, 0xff800001u, 0x7fc00001u, 0x80000001u, 0x007fffffu};
  for (size_t i = 0; i < sizeof patterns / sizeof *patterns; ++i) std::memcpy(&x[100 + 33 * i], &patterns[i], 4);
  for (SimdLevel level : Levels()) {
    SimdLevelScope scope(level);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{4099}}) {
      std::vector<bfloat16> got(n);
      ConvertToBf16(x.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const bfloat16 want = FloatToBf16(x[i]);
        ASSERT_EQ(std::memcmp(&got[i], &want, sizeof want), 0)
            << "element " << i << " of " << n << " at " << SimdLevelName(level);
      }
      std::vector<float> back(n);
      ConvertFromBf16(got.data(), back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = Bf16ToFloat(got[i]);
        ASSERT_EQ(std::memcmp(&back[i], &want, sizeof want), 0) << i;
      }
    }
  }
}

}  // namespace
}  // namespace nabla::cpu
