// softplus: Out = ln(1 + e^(beta * X)) / beta, elementwise, or X where beta * X > threshold (Paddle's
// softplus since its beta/threshold checkpoint; the defaults differ from the older attribute-less op only
// above X = 20, by less than 3e-9). ln(1 + e^z) is computed without overflow for large |z|. The gradient
// reads X (Paddle's softplus_grad): Out@GRAD * sigmoid(beta * X), or Out@GRAD above the threshold.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(softplus) {
  GradCheckSpec steep =
      CheckCase("beta_2_threshold_3", {AwayFromKinks(CheckInput("X", {3, 4}, -3.0, 3.0), {1.5}, 0.02)},
                {{"beta", 2.0f}, {"threshold", 3.0f}});
  RegisterActivation(
      registrar, "softplus",
      "Softplus, elementwise: Out = ln(1 + e^(beta * X)) / beta, reverting to Out = X where beta * X > threshold.",
      __FILE__, __LINE__,
      {{"beta", 1.0f, "(float, default 1.0) the scale of X inside the logarithm"},
       {"threshold", 20.0f, "(float, default 20.0) above this beta * X the op is linear"}},
      GradReads::kX, [](auto x, const auto& a) { return a[0] * x > a[1] ? x : Softplus(a[0] * x) / a[0]; },
      [](auto x, auto dout, const auto& a) { return a[0] * x > a[1] ? dout : dout * Sigmoid(a[0] * x); })
      .GradCheck(CheckCase("defaults", {CheckInput("X", {3, 4}, -4.0, 4.0)}))
      .GradCheck(CheckCase("large", {AwayFromKinks(CheckInput("X", {3, 4}, -30.0, 30.0), {20.0}, 0.05)}))
      // The step where beta * X crosses threshold: the samples keep off it.
      .GradCheck(steep);
}

}  // namespace nabla::nn
