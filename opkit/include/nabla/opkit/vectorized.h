#pragma once
// cpu::ParallelFor whose chunks run at the CPU's vector width: each chunk's
// body is compiled for AVX-512, AVX2 + FMA and the baseline, and the widest
// the CPU has runs (nabla/cpu_vectorized.h). A plugin is built for baseline
// x86-64, so its loops would otherwise run as SSE on any CPU. The kit's
// elementwise, broadcast and reduction walks use it; nabla_add_plugin
// builds with -ffp-contract=off, so the wider copies give the baseline's
// bits (no a * b + c becomes an FMA).
#include <cstdint>

#include "nabla/cpu/cpu.h"
#include "nabla/cpu_vectorized.h"

namespace nabla::opkit {

template <typename F>
void VectorizedParallelFor(int64_t n, int64_t grain, F&& body) {
  cpu::ParallelFor(n, grain, [&](int64_t begin, int64_t end) { cpu_isa::Vectorized([&] { body(begin, end); }); });
}

}  // namespace nabla::opkit
