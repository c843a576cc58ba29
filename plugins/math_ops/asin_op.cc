// asin: Out = arcsin(X), elementwise (|X| <= 1). The gradient reads X: X@GRAD = Out@GRAD / sqrt(1 - X^2).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(asin) {
  RegisterActivation(
      registrar, "asin", "Arcsine, elementwise: Out = arcsin(X) for X in [-1, 1] (NaN outside).", __FILE__, __LINE__,
      {}, GradReads::kX, [](auto x, const auto&) { return std::asin(x); },
      [](auto x, auto dout, const auto&) { return dout / std::sqrt(decltype(x)(1) - x * x); })
      // Inside the domain, away from +-1 where the derivative is infinite.
      .GradCheck(CheckCase("inside_domain", {CheckInput("X", {2, 3}, -0.9, 0.9)}));
}

}  // namespace
}  // namespace nabla::math_ops
