// cos: Out = cos(X), elementwise. The gradient reads X (Paddle's cos_grad): X@GRAD = -Out@GRAD * sin(X).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(cos) {
  RegisterActivation(
      registrar, "cos", "Cosine, elementwise: Out = cos(X).", __FILE__, __LINE__, {}, GradReads::kX,
      [](auto x, const auto&) { return std::cos(x); },
      [](auto x, auto dout, const auto&) { return -dout * std::sin(x); })
      .GradCheck(CheckCase("wide_range", {CheckInput("X", {2, 3}, -4.0, 4.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
