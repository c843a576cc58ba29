#pragma once
// Vector math beyond cpu.h's activations, for kernels that build their own
// loops (flash_attn's online softmax).
#include <cstdint>

#include "nabla/export.h"

namespace nabla::cpu {

// y = exp(x - shift) elementwise, float32, vectorized (relative error about
// 1e-7); exactly 0 where x - shift < -87 (and for x = -inf), so masked
// scores cost no more than others. y may be x.
NABLA_API void ExpShifted(const float* x, float shift, float* y, int64_t n);

}  // namespace nabla::cpu
