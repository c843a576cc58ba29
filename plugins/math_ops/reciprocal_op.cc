// reciprocal: Out = 1 / X, elementwise. The gradient reads Out (Paddle's reciprocal_grad):
// X@GRAD = -Out@GRAD * Out^2.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(reciprocal) {
  RegisterActivation(
      registrar, "reciprocal", "Reciprocal, elementwise: Out = 1 / X.", __FILE__, __LINE__, {}, GradReads::kOut,
      [](auto x, const auto&) { return decltype(x)(1) / x; },
      [](auto out, auto dout, const auto&) { return -dout * out * out; })
      // Both signs, away from the pole at 0.
      .GradCheck(CheckCase("positive", {CheckInput("X", {2, 3}, 0.5, 2.0)}))
      .GradCheck(CheckCase("negative", {CheckInput("X", {2, 3}, -2.0, -0.5)}));
}

}  // namespace
}  // namespace nabla::math_ops
