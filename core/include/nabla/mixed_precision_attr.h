#pragma once
// The name of the attribute by which ops opt into float32 outputs under
// bfloat16 mixed precision, on its own so that op code of both builds sees
// it: the core's nabla/mixed_precision.h (which needs nabla/program.h) and
// the op kit compiled against the C ABI SDK (which must not).

namespace nabla {

// The bool attribute by which an op with a bfloat16 kernel says that kernel
// can write every output in float32 (its float32 accumulator, unrounded).
// Paddle's oneDNN ops carry the same name for the same purpose. In the
// standard plugins the grad ops of the GEMM-bound ops declare it, forward
// ops do not: forward values stay rounded as in PyTorch's autocast.
inline constexpr const char* kForceFp32OutputAttr = "force_fp32_output";

}  // namespace nabla
