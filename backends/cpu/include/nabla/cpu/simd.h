#pragma once
// Run-time choice of vector width for hot loops, without raising the ISA
// the binaries are built for (they still run on plain x86-64).
//
// RunSimd(f) calls f() from one of three copies of a small wrapper: one
// compiled for AVX-512 (F, BW, DQ, VL), one for AVX2, one for the build's
// baseline. Each copy is `flatten`, so f and what it calls inline into it
// and its loops vectorize at that copy's width; the copy matching
// ActiveSimdLevel() runs. Functions f calls that do not inline (libm) keep
// their own code, and nothing compiled for a wider ISA leaks into code
// shared with the baseline (a template instantiated elsewhere is compiled
// for the baseline; only its inlined copy here is wider).
//
// Results are the same bits on every level: the build does not contract
// a * b + c into FMAs (-ffp-contract=off), and loops that reduce keep their
// own fixed lane order (vmath.h), so wider vectors only do the same
// elementwise operations in more lanes.
#include <cstdint>

#include "nabla/export.h"

namespace nabla::cpu {

enum class SimdLevel : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest level this CPU runs.
NABLA_API SimdLevel SupportedSimdLevel();
// The level RunSimd uses: SupportedSimdLevel(), lowered by the environment
// variable NABLA_SIMD=baseline|avx2|avx512 (read once; a level the CPU lacks
// or an unknown name gives a one-line warning on stderr and is not used),
// or by SetSimdLevel.
NABLA_API SimdLevel ActiveSimdLevel();
// Sets the level for the whole process (tests compare the levels' results);
// clamped to SupportedSimdLevel(). Returns the level now in use. Not to be
// called while kernels run on other threads.
NABLA_API SimdLevel SetSimdLevel(SimdLevel level);
// "baseline", "avx2" or "avx512".
NABLA_API const char* SimdLevelName(SimdLevel level);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NABLA_SIMD_DISPATCH 1
// GCC vectorizes for 256-bit registers under AVX-512 unless told otherwise
// (clang uses 512 and has no such attribute option).
#if defined(__clang__)
#define NABLA_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), flatten))
#else
#define NABLA_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512"), flatten))
#endif
#define NABLA_TARGET_AVX2 __attribute__((target("avx2"), flatten))
#define NABLA_TARGET_BASELINE __attribute__((flatten))
#else
#define NABLA_SIMD_DISPATCH 0
#define NABLA_TARGET_BASELINE
#endif

namespace simd_internal {
// Distinct names, not overloads: overloads differing only in target() are
// GCC's function multiversioning, dispatched by an ifunc (which crashed
// TSan binaries at load, gemm_bf16.cc).
template <typename F>
NABLA_TARGET_BASELINE void RunBaseline(const F& f) {
  f();
}
#if NABLA_SIMD_DISPATCH
template <typename F>
NABLA_TARGET_AVX2 void RunAvx2(const F& f) {
  f();
}
template <typename F>
NABLA_TARGET_AVX512 void RunAvx512(const F& f) {
  f();
}
#endif
}  // namespace simd_internal

// f() compiled for the active level (see above). f should be a small
// loop nest over plain pointers held in locals or captured by value.
template <typename F>
void RunSimd(const F& f) {
#if NABLA_SIMD_DISPATCH
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      simd_internal::RunAvx512(f);
      return;
    case SimdLevel::kAvx2:
      simd_internal::RunAvx2(f);
      return;
    case SimdLevel::kBaseline:
      break;
  }
#endif
  simd_internal::RunBaseline(f);
}

}  // namespace nabla::cpu
