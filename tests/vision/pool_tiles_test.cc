// pool2d's fast paths for windows that tile the input (k == stride, no
// padding: the CNN's 2x2 pools, SSE2 four windows at a time for max's
// gradient) against the rule the general loops follow, written out plainly
// here: max takes the windows' values in scan order with std::max, and its
// gradient goes wholly to the first maximum of the window in that order;
// average divides the scan-order sum by the window's size. The inputs are
// full of ties, hold NaNs and -0.0 gradients, and leave an odd last row and
// column no window covers, so every output must match bit for bit (NaN
// where NaN). NABLA_DNNL=0 keeps oneDNN out: its kernels are checked
// against the loops in dnnl_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

using Ints = std::vector<int>;

struct Pool {
  std::string type;  // "max" or "avg"
  int64_t n, c, h, w, kh, kw;
};

// The float32 value the kernels see, widened back.
double F32(double v) { return static_cast<double>(static_cast<float>(v)); }

struct Expected {
  op_case::Doubles out, dx;
};

Expected Reference(const Pool& p, const op_case::Doubles& x, const op_case::Doubles& dy) {
  const int64_t oh = p.h / p.kh, ow = p.w / p.kw;
  Expected e{op_case::Doubles(p.n * p.c * oh * ow), op_case::Doubles(p.n * p.c * p.h * p.w, 0.0)};
  for (int64_t plane = 0; plane < p.n * p.c; ++plane)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t o = (plane * oh + oy) * ow + ox;
        float best = -std::numeric_limits<float>::infinity(), sum = 0.0f;
        int64_t at = -1;
        float first_best = 0.0f;
        for (int64_t ky = 0; ky < p.kh; ++ky)
          for (int64_t kx = 0; kx < p.kw; ++kx) {
            const int64_t i = (plane * p.h + oy * p.kh + ky) * p.w + ox * p.kw + kx;
            const float v = static_cast<float>(x[i]);
            best = std::max(best, v);
            sum += v;
            if (at < 0 || v > first_best) {
              first_best = v;
              at = i;
            }
          }
        const float count = static_cast<float>(p.kh * p.kw);
        const float g = static_cast<float>(dy[o]);
        if (p.type == "max") {
          e.out[o] = best;
          e.dx[at] = static_cast<double>(0.0f + g);
        } else {
          e.out[o] = sum / count;
          for (int64_t ky = 0; ky < p.kh; ++ky)
            for (int64_t kx = 0; kx < p.kw; ++kx)
              e.dx[(plane * p.h + oy * p.kh + ky) * p.w + ox * p.kw + kx] = static_cast<double>(0.0f + g / count);
        }
      }
  return e;
}

void ExpectBits(const op_case::Doubles& want, const op_case::Doubles& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", want NaN";
      continue;
    }
    ASSERT_EQ(want[i], got[i]) << what << "[" << i << "]";
    ASSERT_EQ(std::signbit(want[i]), std::signbit(got[i])) << what << "[" << i << "]: the sign of zero";
  }
}

class PoolTiles : public ::testing::TestWithParam<Pool> {
 protected:
  static void SetUpTestSuite() {
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
  }
};

TEST_P(PoolTiles, MatchTheGeneralRuleBitForBit) {
  const Pool& p = GetParam();
  GradCheckSpec spec;
  spec.name = "tiles";
  GradCheckInput in;
  in.slot = "X";
  in.shape = {p.n, p.c, p.h, p.w};
  // Five values: most windows hold ties; every 37th a NaN.
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> pick(-2, 2);
  for (int64_t i = 0; i < NumElements(in.shape); ++i)
    in.values.push_back(i % 37 == 5 ? std::numeric_limits<double>::quiet_NaN() : pick(rng));
  spec.inputs = {in};
  spec.outputs = {{"Out", 1}};
  spec.attrs = {
      {"pooling_type", p.type}, {"ksize", Ints{int(p.kh), int(p.kw)}}, {"strides", Ints{int(p.kh), int(p.kw)}}};
  op_case::Case c = op_case::BuildCase("pool2d", spec);

  // Upstream gradients: a few -0.0 among values float32 holds exactly.
  op_case::Doubles dy;
  for (op_case::Input& i : c.inputs)
    if (i.name == GradVarName("Out_out0")) {
      for (size_t k = 0; k < i.values.size(); ++k) i.values[k] = k % 5 == 2 ? -0.0 : F32(i.values[k]);
      dy = i.values;
    }
  ASSERT_FALSE(dy.empty());
  const Expected want = Reference(p, c.inputs[0].values, dy);

  setenv("NABLA_DNNL", "0", 1);
  const op_case::Result got = op_case::RunOps(c.ops, c.inputs, HostDevice());
  unsetenv("NABLA_DNNL");
  ExpectBits(want.out, got.values.at("Out_out0"), "Out");
  ExpectBits(want.dx, got.values.at(GradVarName("X_0")), "X@GRAD");
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTiles,
                         ::testing::Values(
                             // 2x2 max: windows in SSE2 blocks of four and a scalar tail (10 = 8 + 2),
                             // with an uncovered last row and column and without (dx not zeroed first).
                             Pool{"max", 2, 3, 9, 21, 2, 2}, Pool{"max", 2, 3, 10, 20, 2, 2},
                             Pool{"max", 3, 2, 16, 16, 2, 2},
                             // Tiling windows of other sizes, and average pooling.
                             Pool{"max", 2, 2, 9, 12, 3, 3}, Pool{"max", 1, 2, 8, 9, 2, 3},
                             Pool{"avg", 2, 3, 9, 21, 2, 2}, Pool{"avg", 1, 2, 9, 8, 3, 2}),
                         [](const ::testing::TestParamInfo<Pool>& info) {
                           const Pool& p = info.param;
                           return p.type + "_" + std::to_string(p.h) + "x" + std::to_string(p.w) + "_k" +
                                  std::to_string(p.kh) + "x" + std::to_string(p.kw);
                         });

}  // namespace
}  // namespace nabla
