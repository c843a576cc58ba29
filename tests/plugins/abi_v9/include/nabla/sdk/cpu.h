#pragma once
// nabla/cpu/cpu.h for plugins on the C ABI (nabla/sdk/plugin.h), header-only,
// with its names: cpu::ParallelFor over the core's api->parallel_for, so a
// kernel's loop splits over the executor's threads as the core's own does,
// and (C ABI version 3) the CPU backend's GEMM and vector math, so a
// plugin's kernel computes with what nabla's own kernels use (the library
// the GEMM policy picks; the vectorised tanh and gelu, so it gets nabla's
// ops' bits) without linking a BLAS; (version 4) its float32 row kernels
// (nabla/cpu/vmath.h's), SumArrays and bfloat16 conversions, the same bits
// as the standard build's; (version 5) its GEMM with a fused bias and
// activation; (version 9) the row kernels over many rows a call. Failures
// throw nabla::Error.
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

// ---- version 4: the row kernels of nabla/cpu/vmath.h (its shim includes
// this header), SumArrays and the bfloat16 conversions; float32, one call
// through the table each, no copies (kernels call them once per row).

// The largest element of x[0, n), n >= 1.
inline float RowMax(const float* x, int64_t n) {
  float m;
  sdk_detail::Check(Api().cpu_row_max(x, n, &m));
  return m;
}
// y = exp(x - shift) elementwise, exactly 0 where x - shift < -87; y may be x.
inline void ExpShifted(const float* x, float shift, float* y, int64_t n) {
  sdk_detail::Check(Api().cpu_exp_shifted(x, shift, y, n, nullptr));
}
// y = exp(x - shift) as ExpShifted, returning sum(y).
inline float ExpShiftedSum(const float* x, float shift, float* y, int64_t n) {
  float sum;
  sdk_detail::Check(Api().cpu_exp_shifted(x, shift, y, n, &sum));
  return sum;
}
// y *= s.
inline void ScaleRow(float* y, float s, int64_t n) { sdk_detail::Check(Api().cpu_scale_row(y, s, n)); }
// sum(a * b).
inline float DotRow(const float* a, const float* b, int64_t n) {
  float dot;
  sdk_detail::Check(Api().cpu_dot_row(a, b, n, &dot));
  return dot;
}
// softmax's gradient along a row: dx = y * (dy - sum(y * dy)).
inline void SoftmaxGradRow(const float* y, const float* dy, float* dx, int64_t n) {
  sdk_detail::Check(Api().cpu_softmax_grad_row(y, dy, dx, n));
}
// layer_norm of one row: y = (x - mean) * rstd * scale + bias (scale, bias
// may be null); writes the row's mean and biased variance.
inline void LayerNormRow(const float* x, int64_t n, const float* scale, const float* bias, float eps, float* y,
                         float* mean, float* var) {
  sdk_detail::Check(Api().cpu_layer_norm_row(x, n, scale, bias, eps, y, mean, var));
}
// layer_norm's gradient for one row from its mean and rstd (dx, dscale,
// dbias each may be null; dscale and dbias are added to).
inline void LayerNormGradRow(const float* x, const float* dy, int64_t n, float mean, float rstd, const float* scale,
                             float* dx, float* dscale, float* dbias) {
  sdk_detail::Check(Api().cpu_layer_norm_grad_row(x, dy, n, mean, rstd, scale, dx, dscale, dbias));
}
// y = xs[0] + ... + xs[count - 1] elementwise, in that order; count >= 1.
inline void SumArrays(const float* const* xs, int64_t count, float* y, int64_t n) {
  sdk_detail::Check(Api().cpu_sum_arrays(xs, count, y, n));
}
// float32 <-> bfloat16; to bfloat16 rounds to nearest even (FloatToBf16 bit
// for bit), from bfloat16 is exact.
static_assert(sizeof(bfloat16) == sizeof(uint16_t) && alignof(bfloat16) == alignof(uint16_t));
inline void ConvertToBf16(const float* x, bfloat16* y, int64_t n) {
  sdk_detail::Check(Api().cpu_to_bf16(x, reinterpret_cast<uint16_t*>(y), n));
}
inline void ConvertFromBf16(const bfloat16* x, float* y, int64_t n) {
  sdk_detail::Check(Api().cpu_from_bf16(reinterpret_cast<const uint16_t*>(x), y, n));
}

// C = alpha * op(A) * op(B) + beta * C with bfloat16 A and B and float32
// accumulation (the backend's oneDNN matmul); shapes and leading dimensions
// as in Gemm.
inline void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                     int64_t lda, const bfloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sdk_detail::Check(Api().cpu_gemm_bf16(trans_a, trans_b, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda,
                                        reinterpret_cast<const uint16_t*>(b), ldb, beta, c, NABLA_C_FLOAT32, ldc));
}
// The same with C rounded to bfloat16 (C is only written).
inline void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                     int64_t lda, const bfloat16* b, int64_t ldb, bfloat16* c, int64_t ldc) {
  sdk_detail::Check(Api().cpu_gemm_bf16(trans_a, trans_b, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda,
                                        reinterpret_cast<const uint16_t*>(b), ldb, 0.0f, c, NABLA_C_BFLOAT16, ldc));
}

// ---- version 5: the GEMM with a fused bias and activation (fc), as
// nabla/cpu/cpu.h declares it.

// The GEMM libraries (GemmBiasAct's `forced`), and the activation it
// applies (see GemmBiasAct).
enum class GemmLib { kOpenBlas, kOneDnn };
enum class GemmAct { kIdentity, kRelu, kTanh, kSigmoid };
using GemmEpilogue = void (*)(void* ctx, int64_t row, int64_t col, int64_t rows, int64_t cols);

namespace sdk_gemm_detail {
// The plugin's epilogue, run by the core's threads: what it throws is
// carried over them (the first; later blocks skip their epilogue) and
// rethrown after the GEMM, as cpu::ParallelFor does.
struct Epilogue {
  GemmEpilogue fn;
  void* ctx;
  std::exception_ptr error;
  bool failed;
  static void Run(void* self, int64_t row, int64_t col, int64_t rows, int64_t cols) {
    Epilogue& e = *static_cast<Epilogue*>(self);
    if (__atomic_load_n(&e.failed, __ATOMIC_ACQUIRE)) return;
    try {
      e.fn(e.ctx, row, col, rows, cols);
    } catch (...) {
      if (!__atomic_exchange_n(&e.failed, true, __ATOMIC_ACQ_REL)) e.error = std::current_exception();
    }
  }
};
inline void Run(int32_t dtype, const GemmLib* forced, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                const void* b, int64_t ldb, const void* bias, GemmAct act, void* c, int64_t ldc, GemmEpilogue epilogue,
                void* ctx) {
  Epilogue e{epilogue, ctx, nullptr, false};
  const int32_t lib = !forced                       ? NABLA_C_GEMM_LIB_POLICY
                      : *forced == GemmLib::kOneDnn ? NABLA_C_GEMM_LIB_ONEDNN
                                                    : NABLA_C_GEMM_LIB_OPENBLAS;
  sdk_detail::Check(Api().cpu_gemm_bias_act(dtype, lib, m, n, k, a, lda, b, ldb, bias, static_cast<int32_t>(act), c,
                                            ldc, epilogue ? &Epilogue::Run : nullptr, &e));
  if (e.error) std::rethrow_exception(e.error);
}
}  // namespace sdk_gemm_detail

// C = act(A * B + bias), A M x K, B K x N (neither transposed), bias [N]
// (null: none) added to every row: C cut into Gemm's blocks, each computed
// whole by oneDNN with bias and act as post-ops where the GEMM policy (or
// `forced`) picks oneDNN, there is a bias and act is kIdentity or kRelu
// (oneDNN's tanh and sigmoid are not the epilogue's bits), else Gemm's
// product of it handed at once, on the same thread, to epilogue(ctx, row,
// col, rows, cols), which adds the bias and applies the activation to it.
inline void GemmBiasAct(const GemmLib* forced, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                        const float* b, int64_t ldb, const float* bias, GemmAct act, float* c, int64_t ldc,
                        GemmEpilogue epilogue, void* ctx) {
  sdk_gemm_detail::Run(NABLA_C_FLOAT32, forced, m, n, k, a, lda, b, ldb, bias, act, c, ldc, epilogue, ctx);
}
inline void GemmBiasAct(const GemmLib* forced, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                        const double* b, int64_t ldb, const double* bias, GemmAct act, double* c, int64_t ldc,
                        GemmEpilogue epilogue, void* ctx) {
  sdk_gemm_detail::Run(NABLA_C_FLOAT64, forced, m, n, k, a, lda, b, ldb, bias, act, c, ldc, epilogue, ctx);
}

// ---- oneDNN, for plugins that link it themselves (nabla/cpu/dnnl.h's shim
// adds the engine and streams): what the CPU backend shares between the
// process's oneDNN calls, as nabla/cpu/cpu.h declares them.

// Scratch memory for one oneDNN primitive run on the calling thread, 64-byte
// aligned, at least `bytes`, reused by the thread's next call. No bytes may
// be no memory (NULL, as nabla/cpu/cpu.h's on a thread that has none yet):
// a primitive without scratchpad needs none, and NULL is no error then.
inline void* DnnlScratchpad(size_t bytes) {
  void* p = Api().cpu_dnnl_scratchpad(bytes);
  if (!p && bytes != 0) sdk_detail::Check(NABLA_C_ERROR);
  return p;
}
// True where oneDNN runs bfloat16 GEMMs natively.
inline bool HasBf16Gemm() {
  int32_t has = 0;
  sdk_detail::Check(Api().cpu_has_bf16_gemm(&has));
  return has != 0;
}
// The OpenMP team of one oneDNN call: hold one for the call; Granted()
// belongs in every primitive cache key.
class DnnlThreadBudget {
 public:
  DnnlThreadBudget() { sdk_detail::Check(Api().cpu_dnnl_budget_begin(&budget_, &granted_)); }
  ~DnnlThreadBudget() { Api().cpu_dnnl_budget_end(budget_); }
  DnnlThreadBudget(const DnnlThreadBudget&) = delete;
  DnnlThreadBudget& operator=(const DnnlThreadBudget&) = delete;
  int Granted() const { return granted_; }

 private:
  void* budget_ = nullptr;
  int32_t granted_ = 1;
};

// ---- version 9: the row kernels over many rows a call (nabla/cpu/vmath.h's
// LayerNormRows and the rest), each row the one-row kernel's bits: one call
// through the table for a block of rows.

// LayerNormRow for `rows` rows of n >= 1 (x, y a row apart; y may be x).
inline void LayerNormRows(const float* x, int64_t rows, int64_t n, const float* scale, const float* bias, float eps,
                          float* y, float* mean, float* var) {
  sdk_detail::Check(Api().cpu_layer_norm_rows(x, rows, n, scale, bias, eps, y, mean, var));
}
// LayerNormGradRow for `rows` rows (x, dy, dx a row apart); dscale and
// dbias take the rows in order; dx = acc + dx where acc is not null (acc
// may be dx).
inline void LayerNormGradRows(const float* x, const float* dy, int64_t rows, int64_t n, const float* mean,
                              const float* rstd, const float* scale, const float* acc, float* dx, float* dscale,
                              float* dbias) {
  sdk_detail::Check(Api().cpu_layer_norm_grad_rows(x, dy, rows, n, mean, rstd, scale, acc, dx, dscale, dbias));
}
// out[r] = RowMax of row r's first lens[r] elements (rows ld apart), -inf
// for an empty row.
inline void RowMaxRows(const float* x, int64_t ld, int64_t rows, const int64_t* lens, float* out) {
  sdk_detail::Check(Api().cpu_row_max_rows(x, ld, rows, lens, out));
}
// Row r of y = exp(x - shifts[r]) over its first lens[r] elements, then
// zeros to width (0 <= lens[r] <= width); sums[r] their sum where sums is
// not null. y may be x.
inline void ExpShiftedRows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const int64_t* lens,
                           int64_t width, const float* shifts, float* sums) {
  sdk_detail::Check(Api().cpu_exp_shifted_rows(x, ldx, y, ldy, rows, lens, width, shifts, sums));
}
// dots[r] = DotRow of row r of a and of b (n each; rows lda and ldb apart).
inline void DotRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t n, float* dots) {
  sdk_detail::Check(Api().cpu_dot_rows(a, lda, b, ldb, rows, n, dots));
}

}  // namespace cpu
}  // namespace c_sdk
}  // namespace nabla
