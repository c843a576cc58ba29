#pragma once
// float32 GEMM on oneDNN's matmul (Debian's libdnnl, built on OpenMP), for
// blas.cc's policy. Private to the CPU backend: no oneDNN type appears here.
#include <cstdint>

#include "nabla/cpu/cpu.h"

namespace nabla::cpu {

// Whether nabla_cpu was built with oneDNN (sanitizer builds and machines
// without libdnnl-dev are not).
bool DnnlGemmBuilt();

// Whether oneDNN's float32 matmul runs its brgemm kernels on this CPU (they
// need AVX-512; ONEDNN_MAX_CPU_ISA can rule them out). Those are what beat
// OpenBLAS. Without them oneDNN falls back to its own JIT sgemm, which
// bench/gemm_bench.cc measured at 0.71-1.04x OpenBLAS's Haswell kernels
// on the MLP's products (0.89-0.91x on the forward ones; one core of an
// AVX2-only EPYC), so the policy keeps float32 on OpenBLAS there. Decided
// once per process from one probe primitive descriptor, created but never
// run. False in builds without oneDNN.
bool DnnlBrgemmSgemm();

// Row-major C = alpha * op(A) * op(B) + beta * C on the calling thread alone:
// OpenMP is held to one thread for the call, so the caller's task arena
// decides the parallelism exactly as for OpenBLAS. m, n, k > 0. Primitives
// come from a small LRU cache keyed by everything that shapes them, so a
// training step creates none after its first run: creating one costs about
// 18 us (bench/gemm_bench.cc BM_DnnlCreate), 1.6x a 32x128x128 product.
// Returns false, computing nothing, where oneDNN has only its reference
// kernel for the product (the caller runs it on OpenBLAS). Throws when
// oneDNN was not built in or rejects the product.
bool DnnlSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// DnnlSgemm's product on bfloat16 A and B with float32 accumulation, into
// float32 C, or into bfloat16 C (c_bf16; beta 0), from the same cache of
// bound primitives. `any_kernel` takes oneDNN's reference kernel too
// rather than returning false.
bool DnnlGemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                  int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c, bool c_bf16, int64_t ldc,
                  bool any_kernel);

// Row-major C = A * B + bias (neither transposed, bias [N] added to every
// row; act kIdentity only: oneDNN's eltwise post-ops are not the
// activation ops' bits, and its relu maps NaN to 0) on the calling thread
// alone, the bias as a post-op of one cached matmul primitive (cpu::GemmBiasAct's oneDNN path). Returns
// false, computing nothing, where oneDNN has only its reference kernel.
bool DnnlSgemmBiasAct(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      const float* bias, GemmAct act, float* c, int64_t ldc);

// Holds the calling thread's OpenMP team to one thread while oneDNN creates
// or runs a primitive (oneDNN sizes a primitive's split by the count it sees
// at creation), then gives the thread its previous setting back, which the
// oneDNN convolutions of plugins/nn_ops set per call themselves. Only in
// builds with oneDNN.
class OneOmpThread {
 public:
  OneOmpThread();
  ~OneOmpThread();
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int before_;
};

}  // namespace nabla::cpu
