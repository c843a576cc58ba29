// elu: Out = max(0, X) + min(0, alpha * (e^X - 1)), elementwise. The gradient reads X: the exact
// derivative of that formula for any alpha (Paddle's elu_grad: 1 for X > 0, alpha * e^X for X < 0 when
// alpha > 0; 1 + alpha * e^X for X > 0 and 0 below when alpha <= 0).
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(elu) {
  GradCheckSpec negative =
      CheckCase("alpha_-0.5", {AwayFromKinks(CheckInput("X", {3, 4}, -3.0, 3.0), {0.0}, 0.02)}, {{"alpha", -0.5f}});
  RegisterActivation(
      registrar, "elu", "Exponential linear unit, elementwise: Out = max(0, X) + min(0, alpha * (e^X - 1)).", __FILE__,
      __LINE__, {{"alpha", 1.0f, "(float, default 1.0) the scale of the negative part"}}, GradReads::kX,
      [](auto x, const auto& a) {
        using T = decltype(x);
        return std::max(x, T(0)) + std::min(a[0] * std::expm1(x), T(0));
      },
      [](auto x, auto dout, const auto& a) {
        using T = decltype(x);
        return dout * ((x > T(0) ? T(1) : T(0)) + (a[0] * std::expm1(x) < T(0) ? a[0] * std::exp(x) : T(0)));
      })
      // alpha = 1 is smooth at 0; other alphas have a kink there.
      .GradCheck(CheckCase("alpha_1", {CheckInput("X", {3, 4}, -3.0, 3.0)}))
      .GradCheck(
          CheckCase("alpha_0.5", {AwayFromKinks(CheckInput("X", {3, 4}, -3.0, 3.0), {0.0}, 0.02)}, {{"alpha", 0.5f}}))
      .GradCheck(negative);
}

}  // namespace nabla::nn
