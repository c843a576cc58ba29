// acos: Out = arccos(X), elementwise (|X| <= 1). The gradient reads X: X@GRAD = -Out@GRAD / sqrt(1 - X^2).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(acos) {
  RegisterActivation(
      registrar, "acos", "Arccosine, elementwise: Out = arccos(X) for X in [-1, 1] (NaN outside).", __FILE__, __LINE__,
      {}, GradReads::kX, [](auto x, const auto&) { return std::acos(x); },
      [](auto x, auto dout, const auto&) { return -dout / std::sqrt(decltype(x)(1) - x * x); })
      // Inside the domain, away from +-1 where the derivative is infinite.
      .GradCheck(CheckCase("inside_domain", {CheckInput("X", {2, 3}, -0.9, 0.9)}));
}

}  // namespace
}  // namespace nabla::math_ops
