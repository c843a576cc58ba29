// The CPU backend's vector math against the plain loops it replaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "nabla/cpu/cpu.h"

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

}  // namespace
}  // namespace nabla::cpu
