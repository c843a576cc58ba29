// GEMM on OpenBLAS or oneDNN (one policy, GemmLibFor), sharing the cores
// with the task graph by design.
//
// Both libraries run one thread per call (InitCpuBackend sets OpenBLAS's;
// gemm_dnnl.cc holds oneDNN's OpenMP team to one): a large GEMM is split
// here into one block of C per thread of the calling task arena, each block
// a single-threaded product, run by tbb::parallel_for. So every thread nabla
// uses is one of the executor's --threads: when the task graph runs two ops
// at once, their GEMMs' blocks queue in the same arena instead of each op
// starting N OpenBLAS threads on N cores (2N threads fighting, issue 5); in
// a serial chain one GEMM still gets every thread.
#include <cblas.h>
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <type_traits>

#include "gemm_dnnl.h"
#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "split_gemm.h"

extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

namespace nabla::cpu {
namespace {

// From this many multiply-adds a single-threaded float32 product goes to
// oneDNN, where its brgemm kernels run (DnnlBrgemmSgemm: AVX-512 CPUs).
// bench/gemm_bench.cc, one core of the 2-core EPYC (Zen 4), CPU time: from
// 2M (128^3 and the MLP's 32M-49M layers) oneDNN runs 1.03-1.12x
// OpenBLAS's rate with its SkylakeX kernels and 0.99-1.08x with Haswell's;
// below 1M (32^3 to 96^3, the RNN's 32x128x128) 0.3-0.9x, mostly, where
// OpenBLAS's small-matrix kernels win and oneDNN's per-call cost (memory
// objects, a stream, about 2 us) is a large part of the product.
// With B transposed (mul's dX = dOut @ W^T) oneDNN wins alone from about
// half that (gemm_bench: 32x128x128 87 against OpenBLAS's 78 GFLOP/s), but a
// separate threshold for it measured no gain where it mattered: in the RNN
// step the GEMMs' perf samples stayed within 1.3 %, so one rule stays.
// On an AVX2-only EPYC oneDNN has no brgemm kernels and its JIT sgemm ran
// 0.71-1.04x OpenBLAS's Haswell kernels on the MLP's products; there the
// MLP step took 7 % longer with oneDNN (compare_torch), so OpenBLAS runs all.
// On Zen 5 OpenBLAS's SkylakeX kernels gave some of the GPT's shapes alone
// more (gemm_bench: 2048 x 256 x 1024 174 against 151 GFLOP/s), but in the
// GPT B=8, T=256 step at 1 thread OpenBLAS for all (NABLA_DNNL=0) took
// 74.4-76.3 ms against 71.8-72.9 with this rule (3 alternating pairs).
constexpr double kDnnlMinMacs = 1.0 * 1024 * 1024;

// C = beta * C for a product over k == 0; beta == 0 writes zeros even
// where C held NaN, as BLAS does.
template <typename T>
void ScaleOnly(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

// NABLA_DNNL=0 rules oneDNN out here as for the convolutions (plugins/nn_ops):
// for comparing the libraries and for debugging. Read on every call, so a
// process can switch.
bool DnnlAllowed() {
  static const bool built = DnnlGemmBuilt();
  if (!built) return false;
  const char* v = std::getenv("NABLA_DNNL");
  return v == nullptr || std::string(v) != "0";
}

// `forced` picks the library; without it the policy picks one for each
// block, by the block's own shape, since a block is what one call computes.
void SgemmOn(std::optional<GemmLib> forced, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleOnly(m, n, beta, c, ldc);
  SplitGemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc,
            [&](bool ta, bool tb, int64_t mm, int64_t nn, int64_t kk, const float* aa, int64_t la, const float* bb,
                int64_t lb, float* cc, int64_t lc) {
              // oneDNN declines a product it has only its reference kernel for.
              if ((forced ? *forced : GemmLibFor(mm, nn, kk)) == GemmLib::kOneDnn &&
                  DnnlSgemm(ta, tb, mm, nn, kk, alpha, aa, la, bb, lb, beta, cc, lc))
                return;
              cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, mm, nn, kk,
                          alpha, aa, la, bb, lb, beta, cc, lc);
            });
}

// One block of C (rows and columns of the full C at `c`): the OpenBLAS
// product Gemm computes for it, then the epilogue while the block is in the
// core's cache. Never cut further into runs of rows: OpenBLAS's bits change
// with the shape of a call (a 600 x 700 x 40 product in runs of 256 rows
// differed from the whole one, tests/cpu/gemm_test.cc), and the epilogue
// must see Gemm's bits.
template <typename T>
void ProductThenEpilogue(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* block,
                         int64_t ldc, const T* c, GemmEpilogue epilogue, void* ctx) {
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, block, ldc);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a, lda, b, ldb, 0.0, block, ldc);
  const int64_t offset = block - c;
  epilogue(ctx, offset / ldc, offset % ldc, m, n);
}

template <typename T>
void BiasActOn(const GemmLib* forced, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               const T* bias, GemmAct act, T* c, int64_t ldc, GemmEpilogue epilogue, void* ctx) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // act(bias): the epilogue on zeros
    ScaleOnly(m, n, T(0), c, ldc);
    epilogue(ctx, 0, 0, m, n);
    return;
  }
  SplitGemm(false, false, m, n, k, a, lda, b, ldb, c, ldc,
            [&](bool, bool, int64_t mm, int64_t nn, int64_t kk, const T* aa, int64_t la, const T* bb, int64_t lb, T* cc,
                int64_t lc) {
              if constexpr (std::is_same_v<T, float>) {
                // oneDNN declines a product it has only its reference kernel for.
                if (bias != nullptr && (forced ? *forced : GemmLibFor(mm, nn, kk)) == GemmLib::kOneDnn) {
                  // oneDNN's eltwise tanh and logistic are not the bits of
                  // cpu::Tanh and of the caller's sigmoid (fc and the unfused
                  // program differed on Zen 5): the product there, then the
                  // caller's epilogue. Nor is eltwise_relu relu_op's: it
                  // maps NaN to 0, where relu keeps NaN. The bias alone is
                  // exact as a post-op.
                  if (act != GemmAct::kIdentity) {
                    if (DnnlSgemm(false, false, mm, nn, kk, 1.0f, aa, la, bb, lb, 0.0f, cc, lc)) {
                      const int64_t offset = cc - c;
                      epilogue(ctx, offset / ldc, offset % ldc, mm, nn);
                      return;
                    }
                  } else if (DnnlSgemmBiasAct(mm, nn, kk, aa, la, bb, lb, bias + (cc - c) % ldc, act, cc, lc)) {
                    return;
                  }
                }
              }
              ProductThenEpilogue(mm, nn, kk, aa, la, bb, lb, cc, lc, c, epilogue, ctx);
            });
}

}  // namespace

void GemmBiasAct(const GemmLib* forced, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, const float* bias, GemmAct act, float* c, int64_t ldc, GemmEpilogue epilogue, void* ctx) {
  BiasActOn(forced, m, n, k, a, lda, b, ldb, bias, act, c, ldc, epilogue, ctx);
}

void GemmBiasAct(const GemmLib* forced, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                 int64_t ldb, const double* bias, GemmAct act, double* c, int64_t ldc, GemmEpilogue epilogue,
                 void* ctx) {
  BiasActOn(forced, m, n, k, a, lda, b, ldb, bias, act, c, ldc, epilogue, ctx);
}

GemmLib GemmLibFor(int64_t m, int64_t n, int64_t k) {
  // The size first: small products (the RNN's ~190 a step) skip getenv.
  if (static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < kDnnlMinMacs)
    return GemmLib::kOpenBlas;
  return DnnlAllowed() && DnnlBrgemmSgemm() ? GemmLib::kOneDnn : GemmLib::kOpenBlas;
}

std::string GemmPolicy() {
  if (!DnnlAllowed()) return DnnlGemmBuilt() ? "openblas for all (NABLA_DNNL=0)" : "openblas for all (no oneDNN)";
  if (!DnnlBrgemmSgemm()) return "openblas for float32 (oneDNN has no brgemm kernels for this CPU)";
  return StrCat("onednn for float32 from ", kDnnlMinMacs / (1024 * 1024), "M multiply-adds, openblas otherwise");
}

bool OneDnnGemmBuilt() { return DnnlGemmBuilt(); }

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  SgemmOn(std::nullopt, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void GemmWith(GemmLib lib, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  SgemmOn(lib, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleOnly(m, n, beta, c, ldc);
  SplitGemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc,
            [&](bool ta, bool tb, int64_t mm, int64_t nn, int64_t kk, const double* aa, int64_t la, const double* bb,
                int64_t lb, double* cc, int64_t lc) {
              cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, mm, nn, kk,
                          alpha, aa, la, bb, lb, beta, cc, lc);
            });
}

std::string BlasCoreName() { return openblas_get_corename(); }
void SetBlasThreads(int threads) {
  openblas_set_num_threads(threads);
  // The pthread build of OpenBLAS starts its worker threads when it loads,
  // and each spins on a core for about 0.1 s (its thread_timeout) before it
  // sleeps: long enough to take the second core from the executor's worker
  // through the first ~50 runs of a 2-thread program (case (g) of
  // bench/compare_torch ran sequentially until then). Setting the count only
  // stops handing them work; the shutdown OpenBLAS's own fork handler runs
  // joins them, and OpenBLAS starts them again if a later call asks for more
  // than one. Weak: the serial and OpenMP builds have no such threads.
  if (threads == 1 && blas_thread_shutdown_) blas_thread_shutdown_();
}

}  // namespace nabla::cpu
