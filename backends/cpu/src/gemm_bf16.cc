// bfloat16 GEMM on oneDNN's matmul (bf16 operands, float32 accumulation),
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
#include "nabla/cpu/simd.h"
#include "nabla/error.h"

#ifdef NABLA_WITH_DNNL
#include <omp.h>
#include <tbb/task_arena.h>

#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
#include "dnnl_matmul.h"
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

}  // namespace

// Chosen at each call by the active vector level (nabla/cpu/simd.h), not by
// target_clones: the ifunc of a function with internal linkage is resolved
// while the library is relocated, before ThreadSanitizer's runtime is up,
// and crashed every TSan binary at load.
void ConvertToBf16(const float* x, bfloat16* y, int64_t n) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512: {
      static const bool native = __builtin_cpu_supports("avx512bf16");
      if (native)
        ConvertToBf16Avx512Bf16(x, y, n);
      else
        ConvertToBf16Avx512(x, y, n);
      return;
    }
    case SimdLevel::kAvx2:
      ConvertToBf16Avx2(x, y, n);
      return;
    case SimdLevel::kBaseline:
      break;
  }
  ConvertToBf16Portable(x, y, n);
}
#else
}  // namespace

void ConvertToBf16(const float* x, bfloat16* y, int64_t n) { ConvertToBf16Portable(x, y, n); }
#endif

void ConvertFromBf16(const bfloat16* x, float* y, int64_t n) {
  RunSimd([=] {
    const auto* in = reinterpret_cast<const uint16_t*>(x);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
      std::memcpy(y + i, &u, sizeof u);
    }
  });
}

#ifndef NABLA_WITH_DNNL

bool HasBf16Gemm() { return false; }
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

struct MatmulPrim {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, scratchpad;
  AlphaBy alpha = AlphaBy::kOne;
  bool reference = false;  // not made: RunGemmBf16 scales and adds itself
};

// The scratchpad of one primitive for the calling thread, made on first use
// and kept: primitives own their scratchpads (scratchpad_mode::user), so two
// executor threads running GEMMs at once never share oneDNN's global one.
dnnl::memory& ThreadScratchpad(const MatmulPrim& p) {
  thread_local std::unordered_map<const MatmulPrim*, dnnl::memory> scratch;
  auto it = scratch.find(&p);
  if (it == scratch.end()) it = scratch.emplace(&p, dnnl::memory(p.scratchpad, DnnlEngine())).first;
  return it->second;
}

// Primitives live as long as the process, keyed by everything that shapes
// them; after the first step of a run every lookup hits. Creation runs
// under the lock: it takes milliseconds, once per shape. alpha is read at
// run time (AlphaBy, dnnl_matmul.h); a product oneDNN has only its
// reference kernel for is marked, not made, unless `make_reference`.
const MatmulPrim& FindMatmul(const std::string& key, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                             const dnnl::memory::desc& c, bool scaled, float beta, bool make_reference) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<MatmulPrim> > cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    MatmulChoice choice = ChooseMatmul(a, b, c, scaled, beta);
    auto p = std::make_unique<MatmulPrim>(
        MatmulPrim{dnnl::matmul(), a, b, c, choice.pd.scratchpad_desc(), choice.alpha, choice.reference});
    if (p->reference && make_reference) p->reference = false;
    if (!p->reference) p->prim = dnnl::matmul(choice.pd);
    it = cache.emplace(key, std::move(p)).first;
  }
  return *it->second;
}

template <typename C>
void RunGemmBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a, int64_t lda,
                 const bfloat16* b, int64_t ldb, float beta, C* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  using dt = dnnl::memory::data_type;
  constexpr dt kC = std::is_same_v<C, float> ? dt::f32 : dt::bf16;
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
  // One oneDNN call per block of C on the executor's threads, each with a
  // one-thread OpenMP team, as for float32 (blas.cc): a team of its own would
  // wake an OpenMP thread per call to fight the executor's idle TBB worker
  // for the second core (the bf16 MLP step ran slower than float32 at 2
  // threads that way).
  SplitGemm(
      ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
      [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b,
          int64_t ldb, C* c, int64_t ldc) {
        OneOmpThread one;  // first: creating a primitive asks OpenMP for its thread count
        const dnnl::memory::desc ad({m, k}, dt::bf16, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
        const dnnl::memory::desc bd({k, n}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
        auto run = [&](dt c_type, int64_t c_ld, void* cp, bool scaled, float c_beta, bool any_kernel) -> bool {
          std::ostringstream key;
          key << ta << tb << '|' << m << ',' << n << ',' << k << '|' << lda << ',' << ldb << ',' << c_ld << '|'
              << static_cast<int>(c_type) << '|' << scaled << ',' << c_beta << (any_kernel ? "|any" : "");
          const MatmulPrim& p =
              FindMatmul(key.str(), ad, bd, dnnl::memory::desc({m, n}, c_type, dnnl::memory::dims{c_ld, 1}), scaled,
                         c_beta, any_kernel);
          if (p.reference) return false;
          dnnl::memory am(p.a, DnnlEngine(), const_cast<bfloat16*>(a));
          dnnl::memory bm(p.b, DnnlEngine(), const_cast<bfloat16*>(b));
          std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am},
                                                     {DNNL_ARG_WEIGHTS, bm},
                                                     {DNNL_ARG_DST, dnnl::memory(p.c, DnnlEngine(), cp)},
                                                     {DNNL_ARG_SCRATCHPAD, ThreadScratchpad(p)}};
          float scale = alpha;
          AddAlphaArg(p.alpha, &scale, args);
          dnnl::stream& s = DnnlStream();
          p.prim.execute(s, args);
          s.wait();
          return true;
        };
        if (run(kC, ldc, c, alpha != 1.0f, beta, false)) return;
        // Only the reference kernel takes alpha and beta here: the plain
        // product into dense float32 scratch (on the reference kernel too,
        // if nothing else takes even that), then C = alpha * P + beta * C.
        thread_local std::vector<float> scratch;
        scratch.resize(static_cast<size_t>(m * n));
        run(dt::f32, n, scratch.data(), false, 0.0f, true);
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
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & want) == want;
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
