#pragma once
// nabla/cpu/cpu.h for plugins on the C ABI (nabla/sdk/plugin.h), header-only,
// with its names: cpu::ParallelFor over the core's api->parallel_for, so a
// kernel's loop splits over the executor's threads as the core's own does,
// and (C ABI version 3) the CPU backend's GEMM and vector math, so a
// plugin's kernel computes with what nabla's own kernels use (the library
// the GEMM policy picks; the vectorised tanh and gelu, so it gets nabla's
// ops' bits) without linking a BLAS. Failures throw nabla::Error.
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>

#include "nabla/cpu_grain.h"
#include "nabla/sdk/plugin.h"

namespace nabla {
inline namespace c_sdk {
namespace cpu {

// The CPU backend's kParallelGrain and GrainForRows (nabla/cpu_grain.h), so
// loops split as the standard build's do.
using cpu_grain::GrainForRows;
using cpu_grain::kParallelGrain;

// body(begin, end) over chunks of [0, n) of at least `grain` indices, split
// by the core's cpu::ParallelFor (in place below 2 * grain). body must write
// disjoint outputs for disjoint ranges. Nothing may unwind through the core:
// an exception thrown by body is carried over the core's threads (the first
// one; the chunks that see it skip their work) and rethrown here.
template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& body) {
  struct Job {
    std::remove_reference_t<F>* body;
    std::exception_ptr error;
    bool failed;  // set by the first failing chunk; a chunk that sees it skips its work
  } job{std::addressof(body), nullptr, false};
  Api().parallel_for(
      n, grain,
      [](void* user, int64_t begin, int64_t end) {
        Job& j = *static_cast<Job*>(user);
        if (__atomic_load_n(&j.failed, __ATOMIC_ACQUIRE)) return;
        try {
          (*j.body)(begin, end);
        } catch (...) {
          if (!__atomic_exchange_n(&j.failed, true, __ATOMIC_ACQ_REL)) j.error = std::current_exception();
        }
      },
      &job);
  if (job.error) std::rethrow_exception(job.error);
}

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
