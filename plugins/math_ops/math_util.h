#pragma once
// What the math_ops op files share beyond the op kit (nabla/opkit): the kit
// itself, pulled into this plugin's namespace. cpu::Gemm takes empty
// matrices (m, n or k == 0) itself.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/opkit.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::math_ops {

using namespace nabla::opkit;  // NOLINT: every op file here builds on the kit

}  // namespace nabla::math_ops
