#pragma once
// nabla/mixed_precision.h for plugins on the C ABI (see plugin.h here): what
// an op file reads of it, the attribute the bf16 fold sets on grad ops whose
// bfloat16 kernels can write float32 gradients (nabla/mixed_precision_attr.h,
// shared with the core). The passes themselves run in the core.
#include "nabla/mixed_precision_attr.h"
#include "nabla/sdk/plugin.h"
