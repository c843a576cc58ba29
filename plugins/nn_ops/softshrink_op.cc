// softshrink: Out = X - lambda where X > lambda, X + lambda where X < -lambda, else 0. The
// gradient reads X (Paddle's softshrink_grad): Out@GRAD where X > lambda, plus Out@GRAD where X < -lambda.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(softshrink) {
  GradCheckSpec wide = CheckCase("lambda_1.2", {AwayFromKinks(CheckInput("X", {3, 4}, -2.0, 2.0), {-1.2, 1.2}, 0.02)},
                                 {{"lambda", 1.2f}});
  RegisterActivation(
      registrar, "softshrink",
      "Soft shrink, elementwise: Out = X - lambda where X > lambda, X + lambda where X < -lambda, else 0.", __FILE__,
      __LINE__, {{"lambda", 0.5f, "(float, default 0.5) the non-negative offset"}}, GradReads::kX,
      [](auto x, const auto& a) {
        using T = decltype(x);
        return (x > a[0] ? x - a[0] : T(0)) + (x < -a[0] ? x + a[0] : T(0));
      },
      [](auto x, auto dout, const auto& a) {
        using T = decltype(x);
        return (x > a[0] ? dout : T(0)) + (x < -a[0] ? dout : T(0));
      })
      // The kinks at +-lambda have no derivative: the samples keep off them.
      .GradCheck(CheckCase("off_kinks", {AwayFromKinks(CheckInput("X", {3, 4}), {-0.5, 0.5}, 0.02)}))
      .GradCheck(wide);
}

}  // namespace nabla::nn
