#pragma once
// What flash_attn's CPU and OpenCL kernels share.
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>

#include "nabla/op_registry.h"
#include "nabla/program.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::nn {

// attn_mask's strides over target = [batch, heads, seq_q, seq_k], its dims
// right-aligned against target's, each 1 (stride 0: broadcast) or equal.
// Throws kInvalidArgument naming `where` otherwise.
void AttnMaskStrides(const Shape& mask, const Shape& target, int64_t* strides, const std::string& where);

// flash_attn's dropout (attribute dropout with is_test false), applied to the
// probabilities as Paddle's and FlashAttention's are: a kept probability is
// scaled by 1 / (1 - dropout), a dropped one is 0, softmax_lse is that of
// the scores before dropout. Probability (b * heads + h, i, j) is kept iff
// PhiloxUniform(word j % 4 of Philox4x32(seed, {j / 4, i, b * heads + h,
// offset})) >= dropout (nabla/opkit/philox.h): a function of its position,
// so backward draws the same mask again from seed_offset and nothing of
// size [seq_q, seq_k] is stored. flash_attn.cl draws the same words.
struct AttnDropout {
  bool on = false;
  float p = 0.0f;
  double scale = 1.0;  // 1 / (1 - p)
  uint64_t seed = 0;
  uint32_t offset = 0;
};

// The forward's dropout: seed and offset from fixed_seed_offset when given,
// else the op's seed for this run (ExecutionContext::Seed) and offset 0.
AttnDropout ForwardDropout(const ExecutionContext& ctx);
// The grad op's: the forward's seed_offset (or fixed_seed_offset) read back.
AttnDropout BackwardDropout(const ExecutionContext& ctx);

// Whether an additive mask (rank 2 to 4, broadcast over batch and heads; on
// the host) is the causal pattern: 0 exactly where a causal flash_attn shows
// key j to query i (j <= i + seq_k - seq_q) and -1e9 or less (-inf) in all
// its other entries (for a bfloat16 mask -1e9 as bfloat16 rounds it,
// -998244352), with seq_k >= seq_q so every query sees a key. Adding it is
// then the same as causal: exp(s - 1e9 - max) is 0 in float32 and float64
// for any score short of 1e9 - 745, as it is for a hidden key.
bool IsCausalMask(const Tensor& mask, int64_t seq_q, int64_t seq_k);

// softmax_lse = m + log(l) cannot hold log(l) once |m| is large (a row an
// additive mask shifts by -1e9): from this |lse| on, the backward (CPU and
// OpenCL) finds the row's max and sum again rather than take exp(s - lse).
// float32: 128, below which lse's rounding costs a probability 8e-6
// relative at most, about exp's own error on such scores. float64: 1024
// (1.1e-13; float64 is for gradient checks, and at 2^36 a row masked by
// -1e9 had gradients 5e-8 off).
template <typename A>
constexpr A LseRecomputeBound() {
  return sizeof(A) == sizeof(float) ? A(128) : A(1024);
}

// The backward's D in dS = P * (dP * Z - D) is rowsum(dO * O), except for
// up to this many keys (CPU and OpenCL): there it is rowsum(P * Z * dP) from
// the very P and dP that dS is made of, the unfused softmax's own form, so
// sum_j dS_ij is 0 up to that sum's rounding and one key (P = 1) gives dS
// exactly 0, where rowsum(dO * O) rounds another way. Longer rows keep
// rowsum(dO * O), the cheaper pass there.
constexpr int64_t kFlashAttnShortKeys = 32;

// The fusion pass's rewrite of attention written with transpose, matmul and
// softmax into flash_attn (flash_attn_fusion.cc), flash_attn's
// OpBuilder::RewritesBeforeBackward.
size_t FuseAttention(ProgramDesc& program, const std::unordered_set<std::string>& keep);

}  // namespace nabla::nn
