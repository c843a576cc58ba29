#pragma once
// Small bfloat16 GEMMs (flash_attn's tiles) on AVX512-BF16 or AMX
// micro-kernels of our own. Private to the CPU backend; GemmBf16 tries it before oneDNN.
#include <cstdint>

#include "nabla/types.h"

namespace nabla::cpu {

// C = alpha * op(A) * op(B) + beta * C (float32 C, float32 accumulation of
// exact bfloat16 products, as oneDNN's kernels on this ISA: VDPBF16PS, or
// AMX's TDPBF16PS where the CPU has it, NABLA_AMX=0 ruling it out), or
// false, computing nothing, where the CPU lacks AVX512-BF16 or the product
// is larger than a tile (over 128^3 multiply-adds or an edge over 256:
// oneDNN's packing then pays for itself). beta == 0 never reads C.
// Whether SmallGemmBf16 runs on AMX here.
bool SmallGemmBf16OnAmx();

bool SmallGemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                   int64_t lda, const bfloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace nabla::cpu
