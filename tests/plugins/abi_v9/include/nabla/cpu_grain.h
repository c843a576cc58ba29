#pragma once
// How finely CPU loops split, in one place for the CPU backend
// (nabla/cpu/cpu.h) and the C ABI SDK (nabla/sdk/cpu.h), which cannot
// include each other: the SDK must not see the core's C++ classes. Each
// brings these into its own nabla::cpu; a C-ABI plugin's loops then split
// exactly as the standard build's do.
#include <cstdint>

namespace nabla::cpu_grain {

// Elements per chunk of cheap elementwise work: parallel loops split from 2
// chunks on. Measured on the 2-core machine (chains of tanh and scale,
// --threads 1 against 2): no gain at 32K or 64K elements, 2x at 128K; a
// TBB hand-off costs a few microseconds, about 16K elements of tanh.
inline constexpr int64_t kParallelGrain = 32768;

// Chunk size in rows for row-wise work of `cost` elements per row.
inline int64_t GrainForRows(int64_t cost) {
  return cost >= kParallelGrain ? 1 : kParallelGrain / (cost > 0 ? cost : 1);
}

}  // namespace nabla::cpu_grain
