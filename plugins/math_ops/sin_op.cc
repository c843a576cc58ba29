// sin: Out = sin(X), elementwise. The gradient reads X (Paddle's sin_grad): X@GRAD = Out@GRAD * cos(X).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(sin) {
  RegisterActivation(
      registrar, "sin", "Sine, elementwise: Out = sin(X).", __FILE__, __LINE__, {}, GradReads::kX,
      [](auto x, const auto&) { return std::sin(x); },
      [](auto x, auto dout, const auto&) { return dout * std::cos(x); })
      .GradCheck(CheckCase("wide_range", {CheckInput("X", {2, 3}, -4.0, 4.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
