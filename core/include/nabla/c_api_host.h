#pragma once
// The core's side of the C ABI that backends fill in (nabla/c_api.h is the
// plugins' side).
#include <cstdint>

#include "nabla/c_api.h"
#include "nabla/export.h"

namespace nabla {

// The C ABI's parallel_for runs chunks through `fn` when set: the CPU
// backend sets it to its executor-arena loop; until then chunks run inline.
using CApiParallelFor = void (*)(int64_t n, int64_t grain, nabla_range_fn body, void* user);
NABLA_API void SetCApiParallelFor(CApiParallelFor fn);

// The C ABI's cpu_gemm, cpu_vmath and cpu_gelu_grad call these, which the
// CPU backend sets (the core has no math); arguments arrive checked. Until
// then those functions fail naming the missing backend.
struct CApiCpuMath {
  void (*gemm_f32)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
  void (*gemm_f64)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                   int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);
  void (*vmath)(int32_t fn, const float* x, float* y, int64_t n);  // fn: a nabla_c_vmath_fn
  void (*gelu_grad)(const float* x, const float* dy, float* dx, int64_t n, bool approximate);
};
NABLA_API void SetCApiCpuMath(const CApiCpuMath& hooks);

}  // namespace nabla
