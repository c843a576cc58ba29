// The run-time vector level of nabla/cpu/simd.h.
#include "nabla/cpu/simd.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace nabla::cpu {
namespace {

SimdLevel DetectSimdLevel() {
#if NABLA_SIMD_DISPATCH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2")) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kBaseline;
}

SimdLevel LevelFromEnvironment(SimdLevel supported) {
  const char* env = std::getenv("NABLA_SIMD");
  if (!env || !*env) return supported;
  for (SimdLevel l : {SimdLevel::kBaseline, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (std::strcmp(env, SimdLevelName(l)) != 0) continue;
    if (static_cast<int>(l) <= static_cast<int>(supported)) return l;
    std::fprintf(stderr, "nabla: warning: NABLA_SIMD=%s: this CPU runs at most %s; using %s\n", env,
                 SimdLevelName(supported), SimdLevelName(supported));
    return supported;
  }
  std::fprintf(stderr, "nabla: warning: NABLA_SIMD=%s is not baseline, avx2 or avx512; using %s\n", env,
               SimdLevelName(supported));
  return supported;
}

// -1 until first read; then the level, which SetSimdLevel may change.
std::atomic<int> g_level{-1};

}  // namespace

SimdLevel SupportedSimdLevel() {
  static const SimdLevel level = DetectSimdLevel();
  return level;
}

SimdLevel ActiveSimdLevel() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    // Two threads racing here compute the same value.
    l = static_cast<int>(LevelFromEnvironment(SupportedSimdLevel()));
    int expected = -1;
    if (!g_level.compare_exchange_strong(expected, l, std::memory_order_relaxed)) l = expected;
  }
  return static_cast<SimdLevel>(l);
}

SimdLevel SetSimdLevel(SimdLevel level) {
  if (static_cast<int>(level) > static_cast<int>(SupportedSimdLevel())) level = SupportedSimdLevel();
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  return level;
}

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kBaseline:
      break;
  }
  return "baseline";
}

}  // namespace nabla::cpu
