#pragma once
// What flash_attn's CPU and OpenCL kernels share.
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>

#include "nabla/program.h"
#include "nabla/types.h"

namespace nabla::nn {

// attn_mask's strides over target = [batch, heads, seq_q, seq_k], its dims
// right-aligned against target's, each 1 (stride 0: broadcast) or equal.
// Throws kInvalidArgument naming `where` otherwise.
void AttnMaskStrides(const Shape& mask, const Shape& target, int64_t* strides, const std::string& where);

// The fusion pass's rewrite of attention written with transpose, matmul and
// softmax into flash_attn (flash_attn_fusion.cc); a ForwardFusionFn.
size_t FuseAttention(ProgramDesc& program, const std::unordered_set<std::string>& keep);

}  // namespace nabla::nn
