#pragma once
// The CPU backend's GEMM and vector math for plugins on the C ABI
// (nabla/c_api.h version 3), with the names and calls of nabla/cpu/cpu.h:
// a plugin's CPU kernel computes with what nabla's own kernels use (the
// library the GEMM policy picks, split across the executor's threads; the
// vectorised tanh and gelu, so it gets nabla's ops' bits) without linking a
// BLAS. Failures throw nabla::Error, as the rest of the SDK does.
#include <cstdint>

#include "nabla/sdk/plugin.h"

namespace nabla {
inline namespace c_sdk {
namespace cpu {

// Row-major C = alpha * op(A) * op(B) + beta * C, op(A) M x K, op(B) K x N;
// leading dimensions are those of the matrices as stored.
inline void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sdk_detail::Check(Api().cpu_gemm(NABLA_C_FLOAT32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}
inline void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                 int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  sdk_detail::Check(Api().cpu_gemm(NABLA_C_FLOAT64, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

// y = tanh(x), float32; y may be x.
inline void Tanh(const float* x, float* y, int64_t n) {
  sdk_detail::Check(Api().cpu_vmath(NABLA_C_VMATH_TANH, x, y, n));
}
// y = gelu(x), float32 (approximate: its tanh form); y may be x.
inline void Gelu(const float* x, float* y, int64_t n, bool approximate) {
  sdk_detail::Check(Api().cpu_vmath(approximate ? NABLA_C_VMATH_GELU_TANH : NABLA_C_VMATH_GELU, x, y, n));
}
// dx = dy * gelu'(x), float32; dx may be x or dy.
inline void GeluGrad(const float* x, const float* dy, float* dx, int64_t n, bool approximate) {
  sdk_detail::Check(Api().cpu_gelu_grad(x, dy, dx, n, approximate));
}

}  // namespace cpu
}  // namespace c_sdk
}  // namespace nabla
