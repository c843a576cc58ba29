#pragma once
// nabla/mixed_precision.h for plugins on the C ABI (see plugin.h here): what
// an op file reads of it, the attribute the bf16 fold sets on grad ops whose
// bfloat16 kernels can write float32 gradients. The passes themselves run in
// the core.
#include "nabla/sdk/plugin.h"

namespace nabla {
inline namespace c_sdk {
inline constexpr const char* kForceFp32OutputAttr = "force_fp32_output";
}  // namespace c_sdk
}  // namespace nabla
