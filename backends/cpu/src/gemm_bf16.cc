// bfloat16 GEMM on oneDNN's matmul (bf16 operands, float32 accumulation;
// small products with float32 C on gemm_bf16_small.cc's kernels),
// the float32 <-> bfloat16 conversions, and the oneDNN thread budget that
// every oneDNN call of the process shares (see nabla/cpu/cpu.h).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"

#ifdef NABLA_WITH_DNNL
#include <omp.h>
#include <tbb/task_arena.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <vector>
#include "gemm_bf16_small.h"
#include "gemm_dnnl.h"
#include "nabla/cpu/dnnl.h"
#include "split_gemm.h"
#endif

namespace nabla::cpu {

void* DnnlScratchpad(size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    buffer.reset(std::aligned_alloc(64, rounded));
    NABLA_ENFORCE(buffer != nullptr, kExternal, "out of memory for a ", rounded, "-byte oneDNN scratchpad");
    capacity = rounded;
  }
  return buffer.get();
}

// ---------------------------------------------------------------- conversions

namespace {

// Plain integer code the compiler vectorizes for each ISA it is compiled for
// below; the result is FloatToBf16's bit for bit (round to nearest even,
// NaN kept quiet).
inline __attribute__((always_inline)) void ConvertToBf16Body(const float* x, bfloat16* y, int64_t n) {
  auto* out = reinterpret_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

using ConvertToBf16Fn = void (*)(const float*, bfloat16*, int64_t);

void ConvertToBf16Portable(const float* x, bfloat16* y, int64_t n) { ConvertToBf16Body(x, y, n); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) void ConvertToBf16Avx2(const float* x, bfloat16* y, int64_t n) {
  ConvertToBf16Body(x, y, n);
}
__attribute__((target("avx512f,avx512bw"))) void ConvertToBf16Avx512(const float* x, bfloat16* y, int64_t n) {
  ConvertToBf16Body(x, y, n);
}

// AVX512-BF16's own conversion (VCVTNE2PS2BF16) rounds to nearest even and
// quiets NaNs as the integer code does, at about 3x its rate (one core of
// the EPYC here: 13-15 against 4.8 Gelem/s; the casts were 7 % of the bf16
// MLP step). It reads denormal inputs as zero, though: a block of 32 holding
// one goes the integer way, so the result stays FloatToBf16's bit for bit.
__attribute__((target("avx512bf16,avx512vl,avx512bw,avx512f"))) void ConvertToBf16Avx512Bf16(const float* x,
                                                                                             bfloat16* y, int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512i mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
    const __m512i l = _mm512_castps_si512(lo), h = _mm512_castps_si512(hi);
    const __mmask16 denormal = (_mm512_testn_epi32_mask(l, exponent) & _mm512_test_epi32_mask(l, mantissa)) |
                               (_mm512_testn_epi32_mask(h, exponent) & _mm512_test_epi32_mask(h, mantissa));
    if (denormal) {
      ConvertToBf16Avx512(x + i, y + i, 32);
      continue;
    }
    _mm512_storeu_si512(reinterpret_cast<void*>(y + i), reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  ConvertToBf16Avx512(x + i, y + i, n - i);
}

// Chosen once at run time, not by target_clones: the ifunc of a function
// with internal linkage is resolved while the library is relocated, before
// ThreadSanitizer's runtime is up, and crashed every TSan binary at load.
ConvertToBf16Fn PickConvertToBf16() {
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw")) return ConvertToBf16Avx512Bf16;
  if (__builtin_cpu_supports("avx512bw")) return ConvertToBf16Avx512;
  if (__builtin_cpu_supports("avx2")) return ConvertToBf16Avx2;
  return ConvertToBf16Portable;
}
#else
ConvertToBf16Fn PickConvertToBf16() { return ConvertToBf16Portable; }
#endif

}  // namespace

void ConvertToBf16(const float* x, bfloat16* y, int64_t n) {
  static const ConvertToBf16Fn convert = PickConvertToBf16();
  convert(x, y, n);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void ConvertFromBf16(const bfloat16* x, float* y,
                                                                                  int64_t n) {
  const auto* in = reinterpret_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(y + i, &u, sizeof u);
  }
}

#ifndef NABLA_WITH_DNNL

bool HasBf16Gemm() { return false; }
std::string Bf16Policy() { return "none (built without oneDNN: precision bf16 runs fp32)"; }
DnnlThreadBudget::DnnlThreadBudget() : want_(1), granted_(1) {}
DnnlThreadBudget::~DnnlThreadBudget() = default;
void GemmBf16(bool, bool, int64_t, int64_t, int64_t, float, const bfloat16*, int64_t, const bfloat16*, int64_t, float,
              float*, int64_t) {
  NABLA_THROW(kUnimplemented, "bfloat16 GEMM needs oneDNN, and this build has none (NABLA_WITH_DNNL=OFF)");
}
void GemmBf16(bool, bool, int64_t, int64_t, int64_t, float, const bfloat16*, int64_t, const bfloat16*, int64_t,
              bfloat16*, int64_t) {
  NABLA_THROW(kUnimplemented, "bfloat16 GEMM needs oneDNN, and this build has none (NABLA_WITH_DNNL=OFF)");
}

#else

namespace {

// Threads held by oneDNN calls running at this moment, process wide.
std::atomic<int> g_threads_in_use{0};

// The stored rows x cols matrix at `x` (leading dimension ld) widened to a
// dense float32 one: bfloat16 -> float32 is exact.
std::vector<float> Widened(const bfloat16* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> f(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) ConvertFromBf16(x + r * ld, f.data() + r * cols, cols);
  return f;
}

// Where oneDNN has no native bfloat16 matmul (AVX2 CPUs: it refuses to make
// one; avx512_core without bf16: emulated), the product runs as float32 on
// the operands widened exactly, with float32 accumulation as oneDNN's, so
// a bfloat16 program gives the same kind of result on every CPU.
template <typename C>
void WidenedGemmBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a, int64_t lda,
                     const bfloat16* b, int64_t ldb, float beta, C* c, int64_t ldc) {
  const std::vector<float> af = ta ? Widened(a, k, m, lda) : Widened(a, m, k, lda);
  const std::vector<float> bf = tb ? Widened(b, n, k, ldb) : Widened(b, k, n, ldb);
  const int64_t lda_f = ta ? m : k, ldb_f = tb ? k : n;
  if constexpr (std::is_same_v<C, float>) {
    Gemm(ta, tb, m, n, k, alpha, af.data(), lda_f, bf.data(), ldb_f, beta, c, ldc);
  } else {
    std::vector<float> cf(static_cast<size_t>(m * n));
    Gemm(ta, tb, m, n, k, alpha, af.data(), lda_f, bf.data(), ldb_f, 0.0f, cf.data(), n);
    for (int64_t i = 0; i < m; ++i) ConvertToBf16(cf.data() + i * n, c + i * ldc, n);
  }
}

// True where oneDNN's bfloat16 matmul runs on AMX tiles. Its brgemm kernels
// then take a product only when A, B and C are all dense (oneDNN 2.6: any
// leading dimension past the row gives gemm:jit, at a fifth of the rate:
// a 128 x 512 x 256 block of the MLP's step, 2 threads, mul_grad 0.73 ms
// at 1 thread and 3.1 ms at 2). Products up to a tile run on the
// backend's own AMX kernel (gemm_bf16_small.cc) before this.
// Whether the ISA oneDNN runs on includes `want` (its flags nest).
bool DnnlIsaIncludes(dnnl::cpu_isa want) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

bool HasAmxBf16() {
  static const bool has = DnnlIsaIncludes(dnnl::cpu_isa::avx512_core_amx);
  return has;
}

// rows x cols stored `ld` apart, copied dense into `buf`.
const bfloat16* Densed(const bfloat16* x, int64_t rows, int64_t cols, int64_t ld, std::vector<bfloat16>& buf) {
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(buf.data() + r * cols, x + r * ld, static_cast<size_t>(cols) * sizeof(bfloat16));
  return buf.data();
}

// One block of an AMX product (see HasAmxBf16): strided operands are copied
// dense first and a strided C is computed dense and then added in, so that
// the block runs on the brgemm kernels (the copies are a k-th of the work).
template <typename C>
void DenseBlockBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a, int64_t lda,
                    const bfloat16* b, int64_t ldb, float beta, C* c, int64_t ldc) {
  constexpr bool kBf16Out = std::is_same_v<C, bfloat16>;
  thread_local std::vector<bfloat16> a_buf, b_buf;
  thread_local std::vector<float> c_buf;
  if (lda != (ta ? m : k)) {
    a = ta ? Densed(a, k, m, lda, a_buf) : Densed(a, m, k, lda, a_buf);
    lda = ta ? m : k;
  }
  if (ldb != (tb ? k : n)) {
    b = tb ? Densed(b, n, k, ldb, b_buf) : Densed(b, k, n, ldb, b_buf);
    ldb = tb ? k : n;
  }
  if (ldc == n) {
    DnnlGemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, kBf16Out, ldc, true);
    return;
  }
  c_buf.resize(static_cast<size_t>(m * n));
  DnnlGemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c_buf.data(), false, n, true);
  for (int64_t i = 0; i < m; ++i) {
    const float* p = c_buf.data() + i * n;
    C* row = c + i * ldc;
    if constexpr (kBf16Out) {
      ConvertToBf16(p, row, n);  // beta is 0 for a bfloat16 C
    } else if (beta == 0.0f) {
      std::memcpy(row, p, static_cast<size_t>(n) * sizeof(float));
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] = p[j] + beta * row[j];
    }
  }
}

template <typename C>
void RunGemmBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a, int64_t lda,
                 const bfloat16* b, int64_t ldb, float beta, C* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k > 0 && !HasBf16Gemm()) return WidenedGemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (k == 0) {  // an empty sum: C = beta * C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        C& x = c[i * ldc + j];
        if constexpr (std::is_same_v<C, float>)
          x = beta == 0.0f ? 0.0f : beta * x;
        else
          x = FloatToBf16(beta == 0.0f ? 0.0f : beta * Bf16ToFloat(x));
      }
    return;
  }
  if constexpr (std::is_same_v<C, float>)
    if (SmallGemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  if (HasAmxBf16()) {
    // Blocks of rows: A's and C's stay dense where the whole ones are.
    SplitGemm(
        ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
        [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b,
            int64_t ldb, C* c, int64_t ldc) { DenseBlockBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); },
        /*rows_only=*/true);
    return;
  }
  // One oneDNN call per block of C on the executor's threads, each with a
  // one-thread OpenMP team, as for float32 (blas.cc): a team of its own would
  // wake an OpenMP thread per call to fight the executor's idle TBB worker
  // for the second core (the bf16 MLP step ran slower than float32 at 2
  // threads that way).
  SplitGemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
            [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b,
                int64_t ldb, C* c, int64_t ldc) {
              constexpr bool kBf16Out = std::is_same_v<C, bfloat16>;
              if (DnnlGemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, kBf16Out, ldc, false)) return;
              // Only the reference kernel takes alpha and beta here: the plain
              // product into dense float32 scratch (on the reference kernel too,
              // if nothing else takes even that), then C = alpha * P + beta * C.
              thread_local std::vector<float> scratch;
              scratch.resize(static_cast<size_t>(m * n));
              DnnlGemmBf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, scratch.data(), false, n, true);
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                  const float v = alpha * scratch[static_cast<size_t>(i * n + j)];
                  C& x = c[i * ldc + j];
                  if constexpr (std::is_same_v<C, float>)
                    x = beta == 0.0f ? v : v + beta * x;
                  else
                    x = FloatToBf16(beta == 0.0f ? v : v + beta * Bf16ToFloat(x));
                }
            });
}

}  // namespace

dnnl::engine& DnnlEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& DnnlStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

bool HasBf16Gemm() {
  static const bool has = DnnlIsaIncludes(dnnl::cpu_isa::avx512_core_bf16);
  return has;
}

std::string Bf16Policy() {
  if (!HasBf16Gemm()) return "none on this CPU (precision bf16 runs fp32)";
  return std::string(HasAmxBf16() ? "onednn on amx" : "onednn") + ", tiles to 128^3 on nabla's " +
         (SmallGemmBf16OnAmx() ? "amx" : "avx512_bf16") + " kernels";
}

DnnlThreadBudget::DnnlThreadBudget() : want_(std::max(1, tbb::this_task_arena::max_concurrency())) {
  const int before = g_threads_in_use.fetch_add(want_);
  // A team smaller than the one a primitive was made for never passes that
  // primitive's barriers (conv backward spun forever under OMP_THREAD_LIMIT=1
  // or OMP_DYNAMIC=true): ask for no more than OpenMP allows, and for exactly
  // that many, whatever the user's environment says.
  const int cap = std::max(1, std::min(want_, omp_get_thread_limit()));
  granted_ = std::clamp(cap - before, 1, cap);
  omp_set_dynamic(0);
  omp_set_num_threads(granted_);
}

DnnlThreadBudget::~DnnlThreadBudget() { g_threads_in_use.fetch_sub(want_); }

void GemmBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a, int64_t lda,
              const bfloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  RunGemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void GemmBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a, int64_t lda,
              const bfloat16* b, int64_t ldb, bfloat16* c, int64_t ldc) {
  RunGemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

#endif  // NABLA_WITH_DNNL

}  // namespace nabla::cpu
