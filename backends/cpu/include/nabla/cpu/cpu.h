#pragma once
// The CPU backend: the host device, GEMM on OpenBLAS and oneDNN, and the executors.
// InitCpuBackend() installs the host device and registers the executors; the
// app and tests call it once before running anything.
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "nabla/cpu_grain.h"
#include "nabla/device.h"
#include "nabla/export.h"

namespace nabla::cpu {

// Idempotent.
NABLA_API void InitCpuBackend();

// Host memory, 64-byte aligned.
class NABLA_API CpuDevice final : public Device {
 public:
  DeviceType Type() const override { return DeviceType::kCPU; }
  std::string Name() const override { return "cpu"; }
  void* Allocate(size_t bytes) override;
  void Free(void* ptr, size_t bytes) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
};

// Row-major C = alpha * op(A) * op(B) + beta * C, op(A) is M x K, op(B) K x N.
// Leading dimensions are those of the stored (untransposed) matrices. Any of
// M, N, K may be 0 (K == 0 gives beta * C). Large products split into blocks
// of C across the calling task arena's threads (single-threaded library
// calls), so they keep to the executor's --threads. float32 goes to the
// library GemmLibFor picks; float64 to OpenBLAS (oneDNN has no f64 matmul).
NABLA_API void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
NABLA_API void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                    int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// The GEMM libraries. Which is faster depends on the product's size (oneDNN's
// brgemm kernels win on large products, OpenBLAS on small ones where
// oneDNN's per-call cost dominates), so one policy here chooses for every op.
enum class GemmLib { kOpenBlas, kOneDnn };
// The library Gemm uses for an M x N x K float32 product computed by one
// call (a product split across threads is judged block by block). oneDNN
// only when nabla_cpu was built with it and NABLA_DNNL is not "0".
NABLA_API GemmLib GemmLibFor(int64_t m, int64_t n, int64_t k);
// The policy in one line, for `nabla --version` and the run summary.
NABLA_API std::string GemmPolicy();
NABLA_API bool OneDnnGemmBuilt();
// Gemm on the given library, whatever the policy says: for tests and
// benchmarks. kOneDnn throws when OneDnnGemmBuilt() is false, and runs a
// product oneDNN has only its reference kernel for on OpenBLAS.
NABLA_API void GemmWith(GemmLib lib, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// A fully connected layer's forward with no pass over memory between the
// product and its bias and activation: C = act(A * B + bias), A M x K, B
// K x N (neither transposed), bias [N] added to every row of C. C is cut
// into the blocks Gemm cuts it into (one per thread). Where GemmLibFor (or
// `forced`, for tests and benchmarks) picks oneDNN for a block, oneDNN computes it whole,
// the bias as a post-op of its matmul (cached like Gemm's; not without a bias); with an
// activation, the product, then the epilogue (oneDNN's eltwise ops are not its bits, and its
// relu maps NaN to 0). Elsewhere (OpenBLAS,
// float64) the block is the OpenBLAS product Gemm computes for it, handed at
// once, on the same thread, while it is in that core's cache, to
// `epilogue(ctx, row, col, rows, cols)`, which adds the bias and applies the
// activation to C's rows [row, row + rows) x columns [col, col + cols): the
// caller's own elementwise code, so a fused op can keep the bits of the ops
// it replaces (C's bits before the epilogue are Gemm's). m, n, k may be 0
// (k == 0: the epilogue on zeros).
enum class GemmAct { kIdentity, kRelu, kTanh, kSigmoid };
using GemmEpilogue = void (*)(void* ctx, int64_t row, int64_t col, int64_t rows, int64_t cols);
NABLA_API void GemmBiasAct(const GemmLib* forced, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                           const float* b, int64_t ldb, const float* bias, GemmAct act, float* c, int64_t ldc,
                           GemmEpilogue epilogue, void* ctx);
NABLA_API void GemmBiasAct(const GemmLib* forced, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                           const double* b, int64_t ldb, const double* bias, GemmAct act, double* c, int64_t ldc,
                           GemmEpilogue epilogue, void* ctx);

// y = tanh(x) elementwise, float32, vectorized (a few ulp from std::tanh);
// x and y may be the same buffer. Kernels that compute tanh call this so
// fused and unfused programs agree bit for bit.
NABLA_API void Tanh(const float* x, float* y, int64_t n);
// gelu, float32, vectorized: y = x Phi(x) with Phi the standard normal CDF
// (within about 2e-6 relative of the exact value for |x| < 3, growing as
// x^2 in the far left tail; values below about 1e-38 are not resolved;
// glibc's erff is scalar and was a sixth of a GELU MLP's step), or with
// `approximate` its tanh form. GeluGrad: dx = dy * gelu'(x). Outputs may
// alias their inputs.
NABLA_API void Gelu(const float* x, float* y, int64_t n, bool approximate);
NABLA_API void GeluGrad(const float* x, const float* dy, float* dx, int64_t n, bool approximate);
// y = xs[0] + xs[1] + ... + xs[count - 1] elementwise, added in that order
// (the same bits as the plain loop), float32, vectorized. count >= 1; y must
// not overlap any input.
NABLA_API void SumArrays(const float* const* xs, int64_t count, float* y, int64_t n);

// ---------------------------------------------------------------- bfloat16

// float32 <-> bfloat16, vectorized; to bfloat16 rounds to nearest even
// (FloatToBf16 bit for bit), from bfloat16 is exact.
NABLA_API void ConvertToBf16(const float* x, bfloat16* y, int64_t n);
NABLA_API void ConvertFromBf16(const bfloat16* x, float* y, int64_t n);

// True where oneDNN runs bfloat16 GEMMs natively (avx512_core_bf16 or AMX;
// ONEDNN_MAX_CPU_ISA can lower it). Elsewhere mixed precision would be
// emulated and slower than float32, so callers run float32 instead.
NABLA_API bool HasBf16Gemm();
// Which kernels bfloat16 GEMMs run on here, for `nabla --version`.
NABLA_API std::string Bf16Policy();

// C = alpha * op(A) * op(B) + beta * C with bfloat16 A and B and float32
// accumulation, on oneDNN's matmul (gemm_bf16.cc) or, for tiles (up to
// 128 x 128 x 128 multiply-adds, no edge over 256) with a float32 C on CPUs
// with AVX512-BF16, the backend's own kernels, on AMX where the CPU has it
// (gemm_bf16_small.cc: oneDNN's call costs as much as such a product);
// shapes and leading dimensions as in Gemm. Primitives are cached per
// shape and thread count.
NABLA_API void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                        int64_t lda, const bfloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same with C rounded to bfloat16 (beta = 0: C is only written).
NABLA_API void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                        int64_t lda, const bfloat16* b, int64_t ldb, bfloat16* c, int64_t ldc);

// Scratch memory for one oneDNN primitive run on the calling thread, 64-byte
// aligned, at least `bytes`, reused by the thread's next call. Every cached
// primitive is made with scratchpad_mode::user and runs with this: oneDNN's
// own (library) scratchpad is per thread and sized when the primitive is
// created, so a primitive run on another thread than its creator's (the
// task graph moves ops between threads) overruns it.
NABLA_API void* DnnlScratchpad(size_t bytes);

// Sizes the OpenMP team of one oneDNN call (Debian's oneDNN is built on
// OpenMP): the calling executor's --threads (its TBB arena's concurrency),
// less what other oneDNN calls running at the same moment hold, at most
// OMP_THREAD_LIMIT, and at least the calling thread. Concurrent ops of the task-graph executor thus share
// the budget instead of each starting a full team. Hold one for the call;
// oneDNN splits work for the thread count it sees when a primitive is
// created, so Granted() belongs in every primitive cache key.
class NABLA_API DnnlThreadBudget {
 public:
  DnnlThreadBudget();
  ~DnnlThreadBudget();
  DnnlThreadBudget(const DnnlThreadBudget&) = delete;
  DnnlThreadBudget& operator=(const DnnlThreadBudget&) = delete;
  int Granted() const { return granted_; }

 private:
  int want_;
  int granted_;
};

// ---------------------------------------------------------------- parallel loops

// Large kernels split their work with ParallelFor: [0, n) is cut into chunks
// of at least `grain` indices that tbb::parallel_for runs in the calling
// thread's task arena, which is the executor's, so --threads holds and no
// kernel starts threads of its own. Below 2 * grain indices, or in an arena of
// one thread, body(0, n) runs in place. body(begin, end) must write disjoint
// outputs for disjoint ranges, so results never depend on the split: a
// reduction splits over its output elements and sums each in a fixed order.
// TBB stays out of this header (costly to compile): the template only forwards to
// ParallelForRange.
// kParallelGrain and GrainForRows: nabla/cpu_grain.h, shared with the SDK.
using cpu_grain::GrainForRows;
using cpu_grain::kParallelGrain;

NABLA_API void ParallelForRange(int64_t n, int64_t grain, void (*body)(void*, int64_t, int64_t), void* ctx);

template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& body) {
  if (grain < 1) grain = 1;
  if (n < 2 * grain) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  ParallelForRange(
      n, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<Fn*>(c))(b, e); },
      const_cast<void*>(static_cast<const void*>(std::addressof(body))));
}

// The GEMM kernel OpenBLAS chose ("SkylakeX", "Prescott", ...).
NABLA_API std::string BlasCoreName();
// OpenBLAS's own thread count. InitCpuBackend sets it to 1 and Gemm splits
// work in the task arena instead; more would oversubscribe the cores.
NABLA_API void SetBlasThreads(int threads);

}  // namespace nabla::cpu
