// atan: Out = arctan(X), elementwise. The gradient reads X: X@GRAD = Out@GRAD / (1 + X^2).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(atan) {
  RegisterActivation(
      registrar, "atan", "Arctangent, elementwise: Out = arctan(X), in (-pi/2, pi/2).", __FILE__, __LINE__, {},
      GradReads::kX, [](auto x, const auto&) { return std::atan(x); },
      [](auto x, auto dout, const auto&) { return dout / (decltype(x)(1) + x * x); })
      .GradCheck(CheckCase("wide_range", {CheckInput("X", {2, 3}, -3.0, 3.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
