// flash_attn's float32 kernels against its float64 ones on the same values,
// forward and every gradient. The float32 tile products run on flash_attn's
// own register kernels (AVX-512, or AVX2 for heads of at most 128 rows) and
// the float64 ones on the backend's GEMM, so this pins the own kernels'
// edges: causal bands of 8 rows crossing 128-row tiles, key counts and head
// sizes that fill no vector, transposed products (dV, dK), one query, more
// queries than keys. OpsAtIsa runs it again at the narrower widths.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "op_test_util.h"

namespace nabla::op_test {
namespace {

struct TileCase {
  int64_t batch, seq_q, seq_k, heads, dim, dim_v;
  bool causal;
  bool mask;  // an additive [seq_q, seq_k] bias
};

std::string Name(const TileCase& c) {
  return "b" + std::to_string(c.batch) + "_q" + std::to_string(c.seq_q) + "_k" + std::to_string(c.seq_k) + "_h" +
         std::to_string(c.heads) + "_d" + std::to_string(c.dim) + "x" + std::to_string(c.dim_v) +
         (c.causal ? "_causal" : "") + (c.mask ? "_mask" : "");
}

class FlashAttnTiles : public ::testing::TestWithParam<TileCase> {};

TEST_P(FlashAttnTiles, Float32MatchesFloat64) {
  LoadStandardPlugins();
  const TileCase c = GetParam();
  std::mt19937_64 rng(17);
  const HostTensor q = RandomTensor({c.batch, c.seq_q, c.heads, c.dim}, DType::kFloat32, -2, 2, rng);
  const HostTensor k = RandomTensor({c.batch, c.seq_k, c.heads, c.dim}, DType::kFloat32, -2, 2, rng);
  const HostTensor v = RandomTensor({c.batch, c.seq_k, c.heads, c.dim_v}, DType::kFloat32, -1, 1, rng);
  const HostTensor dout = RandomTensor({c.batch, c.seq_q, c.heads, c.dim_v}, DType::kFloat32, -1, 1, rng);
  const HostTensor mask = RandomTensor({c.seq_q, c.seq_k}, DType::kFloat32, -3, 0, rng);
  std::vector<HostTensor> got[2];  // out, softmax_lse, dq, dk, dv
  for (int f64 = 0; f64 < 2; ++f64) {
    const DType dt = f64 ? DType::kFloat64 : DType::kFloat32;
    OpRun fwd;
    fwd.type = "flash_attn";
    fwd.inputs = {{"q", {q}}, {"k", {k}}, {"v", {v}}};
    if (c.mask) fwd.inputs.push_back({"attn_mask", {mask}});
    fwd.input_dtypes.assign(fwd.inputs.size(), dt);
    fwd.attrs["causal"] = c.causal;
    fwd.outputs = {{"out", 1}, {"softmax_lse", 1}};
    got[f64] = fwd.Run();
    OpRun bwd;
    bwd.type = "flash_attn_grad";
    bwd.inputs = {{"q", {q}},
                  {"k", {k}},
                  {"v", {v}},
                  {"out", {got[f64][0]}},
                  {"softmax_lse", {got[f64][1]}},
                  {GradVarName("out"), {dout}}};
    if (c.mask) bwd.inputs.push_back({"attn_mask", {mask}});
    bwd.input_dtypes.assign(bwd.inputs.size(), dt);
    bwd.attrs["causal"] = c.causal;
    bwd.outputs = {{GradVarName("q"), 1}, {GradVarName("k"), 1}, {GradVarName("v"), 1}};
    for (HostTensor& g : bwd.Run()) got[f64].push_back(std::move(g));
  }
  const char* names[] = {"out", "softmax_lse", "q@GRAD", "k@GRAD", "v@GRAD"};
  for (size_t t = 0; t < got[1].size(); ++t) {
    const HostTensor& want = got[1][t];
    double scale = 0.0;
    for (double e : want.v)
      if (std::isfinite(e)) scale = std::max(scale, std::abs(e));
    ASSERT_GT(scale, 0.0) << names[t];
    ASSERT_EQ(got[0][t].shape, want.shape) << names[t];
    for (size_t i = 0; i < want.v.size(); ++i) {
      const double g = got[0][t].v[i], w = want.v[i];
      if (std::isfinite(w))
        ASSERT_NEAR(g, w, 2e-5 * scale) << names[t] << "[" << i << "] of " << Name(c);
      else  // softmax_lse of a query that sees no key: -inf in both
        ASSERT_EQ(g, w) << names[t] << "[" << i << "] of " << Name(c);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttnTiles,
                         ::testing::Values(
                             // The GPT step's heads (T = 64, 32 wide; T = 256, 64 wide: diagonal
                             // tiles in bands of 8).
                             TileCase{2, 64, 64, 2, 32, 32, true, false}, TileCase{1, 256, 256, 1, 64, 64, true, false},
                             // Key counts, head sizes and values widths that fill no vector; the
                             // diagonal off the tiles' corners; a mask with causal.
                             TileCase{1, 70, 75, 2, 30, 20, true, false}, TileCase{2, 130, 140, 1, 40, 72, true, true},
                             TileCase{1, 33, 17, 3, 8, 8, false, true},
                             // Past 256 keys, dense head copies: k and v transposed a block of 128
                             // keys at a time, the last block part-filled.
                             TileCase{1, 300, 390, 2, 24, 40, false, false},
                             TileCase{1, 290, 290, 1, 64, 48, true, true},
                             // One query (decoding), and more queries than keys (the first see none).
                             TileCase{2, 1, 50, 2, 64, 64, true, false}, TileCase{1, 40, 9, 1, 16, 16, true, false}),
                         [](const ::testing::TestParamInfo<TileCase>& info) { return Name(info.param); });

// With one key every probability is exactly 1, so out = v and the scores'
// gradient is 0: q's and k's gradients must be exact zeros, not rounding
// noise (D taken as rowsum(dO * O) left 3e-6 in k's), in every dtype.
TEST(FlashAttnKernels, OneKeyGivesExactlyZeroQAndKGradients) {
  LoadStandardPlugins();
  std::mt19937_64 rng(5);
  const HostTensor q = RandomTensor({2, 70, 3, 40}, DType::kFloat32, -2, 2, rng);
  const HostTensor k = RandomTensor({2, 1, 3, 40}, DType::kFloat32, -2, 2, rng);
  const HostTensor v = RandomTensor({2, 1, 3, 24}, DType::kFloat32, -1, 1, rng);
  const HostTensor dout = RandomTensor({2, 70, 3, 24}, DType::kFloat32, -1, 1, rng);
  std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64};
  // bfloat16 tiles multiply through cpu::GemmBf16, which needs oneDNN (the
  // sanitizer builds have none).
  if (cpu::OneDnnGemmBuilt()) dtypes.push_back(DType::kBFloat16);
  for (DType dt : dtypes) {
    OpRun fwd;
    fwd.type = "flash_attn";
    fwd.inputs = {{"q", {q}}, {"k", {k}}, {"v", {v}}};
    fwd.input_dtypes.assign(3, dt);
    fwd.outputs = {{"out", 1}, {"softmax_lse", 1}};
    const std::vector<HostTensor> f = fwd.Run();
    OpRun bwd;
    bwd.type = "flash_attn_grad";
    bwd.inputs = {
        {"q", {q}}, {"k", {k}}, {"v", {v}}, {"out", {f[0]}}, {"softmax_lse", {f[1]}}, {GradVarName("out"), {dout}}};
    bwd.input_dtypes = {dt, dt, dt, dt, dt == DType::kBFloat16 ? DType::kFloat32 : dt, dt};
    bwd.outputs = {{GradVarName("q"), 1}, {GradVarName("k"), 1}, {GradVarName("v"), 1}};
    const std::vector<HostTensor> g = bwd.Run();
    for (int t = 0; t < 2; ++t)
      for (size_t i = 0; i < g[t].v.size(); ++i)
        ASSERT_EQ(g[t].v[i], 0.0) << (t ? "k" : "q") << "@GRAD[" << i << "] in " << DTypeName(dt);
    // v's gradient is dout summed over the queries.
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t c = 0; c < 24; ++c) {
          double want = 0.0;
          for (int64_t i = 0; i < 70; ++i) want += RoundTo(dt, dout.v[((b * 70 + i) * 3 + h) * 24 + c]);
          const double tol = dt == DType::kBFloat16 ? 0.3 : 1e-4;
          EXPECT_NEAR(g[2].v[(b * 3 + h) * 24 + c], want, tol) << DTypeName(dt);
        }
  }
}

}  // namespace
}  // namespace nabla::op_test
