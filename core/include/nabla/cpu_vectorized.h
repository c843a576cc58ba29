#pragma once
// Vectorized(f): f's body compiled for the widest vectors the CPU has, picked
// at run time, so a library or plugin built for baseline x86-64 still runs
// its loops with AVX-512 or AVX2 where the CPU has them. In one place for the
// CPU backend's vector math (backends/cpu/src/vmath.cc) and for plugins on
// either ABI (header-only: no symbol of nabla's is used).
//
// Each copy is `flatten`: f and everything it calls that can be inlined is
// compiled at that copy's width, and nothing of it is emitted as a shared
// (weak) symbol that another translation unit could bind to (an AVX-512
// std::vector method picked by the linker for baseline code would fault on
// an AVX2 CPU). Calls that cannot be inlined (through function pointers, or
// to other libraries) run as they are built.
//
// Not GCC's target_clones: its "avx2" clone has no FMA (a separate feature),
// and polynomial chains without FMA ran at half speed (gelu on an AVX2
// EPYC). C++ contracts a * b + c into an FMA where the target has one: the
// backend's vector math relies on it, and its results may differ by an ulp
// between CPUs of different widths (on one CPU every call takes the same
// copy). Plugins are built with -ffp-contract=off (nabla_add_plugin), so
// their wider copies give the baseline's bits.
//
// NABLA_CPU_ISA=baseline, avx2 or avx512 caps the copy taken (never above what the
// CPU has): the tests run the narrower copies this way on a wider CPU.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nabla::cpu_isa {

enum class Isa { kBaseline, kAvx2Fma, kAvx512 };

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
inline Isa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2Fma;
  return Isa::kBaseline;
}

// The widest the CPU has, capped by NABLA_CPU_ISA; found once.
inline Isa CpuIsa() {
  static const Isa isa = [] {
    const Isa has = DetectIsa();
    const char* cap = std::getenv("NABLA_CPU_ISA");
    if (cap == nullptr) return has;
    if (std::strcmp(cap, "baseline") == 0) return Isa::kBaseline;
    if (std::strcmp(cap, "avx2") == 0) return has == Isa::kAvx512 ? Isa::kAvx2Fma : has;
    if (std::strcmp(cap, "avx512") != 0)
      std::fprintf(stderr, "nabla: NABLA_CPU_ISA=%s is not baseline, avx2 or avx512; ignored\n", cap);
    return has;
  }();
  return isa;
}

template <typename F>
__attribute__((target("avx512f,fma"), flatten)) auto OnAvx512(const F& f) -> decltype(f()) {
  return f();
}
template <typename F>
__attribute__((target("avx2,fma"), flatten)) auto OnAvx2Fma(const F& f) -> decltype(f()) {
  return f();
}
#else
inline Isa CpuIsa() { return Isa::kBaseline; }
#endif

template <typename F>
__attribute__((flatten)) auto OnBaseline(const F& f) -> decltype(f()) {
  return f();
}

template <typename F>
auto Vectorized(const F& f) -> decltype(f()) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const Isa isa = CpuIsa();
  if (isa == Isa::kAvx512) return OnAvx512(f);
  if (isa == Isa::kAvx2Fma) return OnAvx2Fma(f);
#endif
  return OnBaseline(f);
}

}  // namespace nabla::cpu_isa
