// The CPU backend's vector math against the plain loops it replaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "nabla/cpu/cpu.h"
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

// gelu runs in blocks of elements, a stage of its formula at a time: an
// element's bits must not depend on where the blocks fall (the length, an
// offset start) nor on writing over the input.
TEST(Gelu, SameBitsForEveryLengthAndInPlace) {
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(1000), dy(1000);
  for (auto& v : x) v = d(gen);
  for (auto& v : dy) v = d(gen);
  for (bool approximate : {false, true}) {
    std::vector<float> y(x.size()), dx(x.size());
    Gelu(x.data(), y.data(), 1000, approximate);
    GeluGrad(x.data(), dy.data(), dx.data(), 1000, approximate);
    for (int64_t start : {0, 1, 63, 64, 65}) {
      for (int64_t n : {1, 7, 63, 64, 65, 130, 600}) {
        std::vector<float> part(x.begin() + start, x.begin() + start + n);
        std::vector<float> grad(dy.begin() + start, dy.begin() + start + n);
        std::vector<float> in_place = part;
        Gelu(in_place.data(), in_place.data(), n, approximate);
        GeluGrad(part.data(), grad.data(), grad.data(), n, approximate);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::memcmp(&in_place[i], &y[start + i], sizeof(float)), 0)
              << "approximate " << approximate << ", start " << start << ", n " << n << ", element " << i;
          ASSERT_EQ(std::memcmp(&grad[i], &dx[start + i], sizeof(float)), 0)
              << "approximate " << approximate << ", start " << start << ", n " << n << ", element " << i;
        }
      }
    }
  }
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

// A NaN score gives a NaN probability (as std::exp and PyTorch do); it
// once passed FastExp's clamps as -87, and a row of NaN or -inf - -inf
// scores came out uniform, on the CPU alone. Infinities keep their limits.
TEST(RowKernels, ExpOfNaNIsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : kRowLengths) {
    std::vector<float> x(n, 0.5f), y(n);
    x[n - 1] = nan;
    if (n > 1) x[0] = -inf;
    const float sum = ExpShiftedSum(x.data(), 0.0f, y.data(), n);
    EXPECT_TRUE(std::isnan(y[n - 1])) << n;
    EXPECT_TRUE(std::isnan(sum)) << n;
    if (n > 1) EXPECT_EQ(y[0], 0.0f) << n;
    ExpShifted(x.data(), 0.0f, y.data(), n);
    EXPECT_TRUE(std::isnan(y[n - 1])) << n;
    std::vector<float> g(n);
    Gelu(x.data(), g.data(), n, false);
    EXPECT_TRUE(std::isnan(g[n - 1])) << n;
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

// The rows kernels are the one-row kernels' bits whatever the row count
// (groups of rows and the rows past them), in place too; the one-row
// kernels themselves are checked against float64 above.
TEST(RowKernels, RowsCallsGiveEachRowsBits) {
  std::mt19937 gen(9);
  const float eps = 1e-5f;
  for (int64_t n : kRowLengths)
    for (int64_t rows : {1, 3, 4, 5, 9}) {
      const std::vector<float> x = RandomRow(gen, rows * n, 2.0f, 1.5f), dy = RandomRow(gen, rows * n, 0.0f, 1.0f),
                               scale = RandomRow(gen, n, 1.0f, 0.3f), bias = RandomRow(gen, n, 0.0f, 1.0f);
      for (bool affine : {false, true}) {
        const float* sc = affine ? scale.data() : nullptr;
        const float* bi = affine ? bias.data() : nullptr;
        std::vector<float> y(x.size()), mean(rows), var(rows), want_y(x.size()), want_mean(rows), want_var(rows);
        LayerNormRows(x.data(), rows, n, sc, bi, eps, y.data(), mean.data(), var.data());
        for (int64_t r = 0; r < rows; ++r)
          LayerNormRow(x.data() + r * n, n, sc, bi, eps, want_y.data() + r * n, &want_mean[r], &want_var[r]);
        ASSERT_EQ(0, std::memcmp(y.data(), want_y.data(), y.size() * sizeof(float))) << n << " x " << rows;
        ASSERT_EQ(mean, want_mean);
        ASSERT_EQ(var, want_var);
        std::vector<float> in_place = x;
        LayerNormRows(in_place.data(), rows, n, sc, bi, eps, in_place.data(), mean.data(), var.data());
        ASSERT_EQ(0, std::memcmp(in_place.data(), want_y.data(), y.size() * sizeof(float))) << n << " x " << rows;

        std::vector<float> rstd(rows);
        for (int64_t r = 0; r < rows; ++r) rstd[r] = 1.0f / std::sqrt(var[r] + eps);
        std::vector<float> dx(x.size()), dscale(n, 0.5f), dbias(n, 0.25f);
        std::vector<float> want_dx(x.size()), want_dscale(n, 0.5f), want_dbias(n, 0.25f);
        LayerNormGradRows(x.data(), dy.data(), rows, n, mean.data(), rstd.data(), sc, nullptr, dx.data(), dscale.data(),
                          dbias.data());
        for (int64_t r = 0; r < rows; ++r)
          LayerNormGradRow(x.data() + r * n, dy.data() + r * n, n, mean[r], rstd[r], sc, want_dx.data() + r * n,
                           want_dscale.data(), want_dbias.data());
        ASSERT_EQ(0, std::memcmp(dx.data(), want_dx.data(), dx.size() * sizeof(float))) << n << " x " << rows;
        ASSERT_EQ(0, std::memcmp(dscale.data(), want_dscale.data(), n * sizeof(float))) << n << " x " << rows;
        ASSERT_EQ(0, std::memcmp(dbias.data(), want_dbias.data(), n * sizeof(float))) << n << " x " << rows;
        std::vector<float> dx_in_dy = dy;  // dx written over dy
        LayerNormGradRows(x.data(), dx_in_dy.data(), rows, n, mean.data(), rstd.data(), sc, nullptr, dx_in_dy.data(),
                          nullptr, nullptr);
        ASSERT_EQ(0, std::memcmp(dx_in_dy.data(), want_dx.data(), dx.size() * sizeof(float))) << n << " x " << rows;
        // A partial added to dx: acc + dx element by element, into another
        // array and in place over the partial.
        const std::vector<float> partial = RandomRow(gen, rows * n, 0.0f, 2.0f);
        std::vector<float> want_sum(x.size()), into(x.size(), 9.0f), over = partial;
        for (size_t i = 0; i < want_sum.size(); ++i) want_sum[i] = partial[i] + want_dx[i];
        LayerNormGradRows(x.data(), dy.data(), rows, n, mean.data(), rstd.data(), sc, partial.data(), into.data(),
                          nullptr, nullptr);
        ASSERT_EQ(0, std::memcmp(into.data(), want_sum.data(), into.size() * sizeof(float))) << n << " x " << rows;
        LayerNormGradRows(x.data(), dy.data(), rows, n, mean.data(), rstd.data(), sc, over.data(), over.data(), nullptr,
                          nullptr);
        ASSERT_EQ(0, std::memcmp(over.data(), want_sum.data(), over.size() * sizeof(float))) << n << " x " << rows;
      }

      // A causal-like tile: row r sees lens[r] of `width` columns, some
      // none; a NaN and a hidden score in the rows.
      const int64_t width = n + 3, ld = width + 2;
      std::vector<float> tile = RandomRow(gen, rows * ld, 0.0f, 3.0f);
      std::vector<int64_t> lens(rows);
      for (int64_t r = 0; r < rows; ++r) lens[r] = r == 1 ? 0 : std::min(width, n - (r * n) / (rows + 1));
      tile[0] = -1e9f;
      if (rows > 2) tile[2 * ld] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> maxes(rows), shifts(rows);
      RowMaxRows(tile.data(), ld, rows, lens.data(), maxes.data());
      for (int64_t r = 0; r < rows; ++r) {
        const float want =
            lens[r] > 0 ? RowMax(tile.data() + r * ld, lens[r]) : -std::numeric_limits<float>::infinity();
        ASSERT_EQ(0, std::memcmp(&maxes[r], &want, sizeof(float))) << n << " x " << rows << " row " << r;
        shifts[r] = lens[r] > 0 ? maxes[r] : 0.0f;
      }
      for (bool with_sums : {false, true}) {
        std::vector<float> out(rows * ld, 7.0f), sums(rows, -1.0f), want(rows * ld, 7.0f);
        ExpShiftedRows(tile.data(), ld, out.data(), ld, rows, lens.data(), width, shifts.data(),
                       with_sums ? sums.data() : nullptr);
        for (int64_t r = 0; r < rows; ++r) {
          float* w = want.data() + r * ld;
          const float sum = lens[r] > 0 ? ExpShiftedSum(tile.data() + r * ld, shifts[r], w, lens[r]) : 0.0f;
          std::fill(w + lens[r], w + width, 0.0f);
          if (with_sums) ASSERT_EQ(0, std::memcmp(&sums[r], &sum, sizeof(float))) << n << " x " << rows;
        }
        ASSERT_EQ(0, std::memcmp(out.data(), want.data(), out.size() * sizeof(float))) << n << " x " << rows;
        if (!with_sums) ASSERT_EQ(sums, std::vector<float>(rows, -1.0f));
      }
      std::vector<float> in_place = tile, want(rows * ld);
      ExpShiftedRows(in_place.data(), ld, in_place.data(), ld, rows, lens.data(), width, shifts.data(), nullptr);
      ExpShiftedRows(tile.data(), ld, want.data(), ld, rows, lens.data(), width, shifts.data(), nullptr);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(0, std::memcmp(in_place.data() + r * ld, want.data() + r * ld, width * sizeof(float))) << r;
    }
}

}  // namespace
}  // namespace nabla::cpu
