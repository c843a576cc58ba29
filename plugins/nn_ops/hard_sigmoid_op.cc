// hard_sigmoid: Out = max(0, min(1, slope * X + offset)), elementwise. The gradient reads Out
// (Paddle's hard_sigmoid_grad): Out@GRAD * slope where 0 < Out < 1, else 0.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(hard_sigmoid) {
  RegisterActivation(
      registrar, "hard_sigmoid",
      "Hard sigmoid, a piecewise-linear sigmoid, elementwise: Out = max(0, min(1, slope * X + offset)).", __FILE__,
      __LINE__,
      {{"slope", 0.2f, "(float, default 0.2) the slope of the linear part; must be positive"},
       {"offset", 0.5f, "(float, default 0.5) the value at X = 0"}},
      GradReads::kOut,
      [](auto x, const auto& a) {
        using T = decltype(x);
        // In this order NaN stays NaN, as Paddle's clamp keeps it.
        return std::max(std::min(a[0] * x + a[1], T(1)), T(0));
      },
      [](auto out, auto dout, const auto& a) {
        using T = decltype(out);
        return (out > T(0) && out < T(1)) ? dout * a[0] : T(0);
      })
      // The kinks where slope * X + offset is 0 or 1: the samples keep off them.
      .GradCheck(CheckCase("off_kinks", {AwayFromKinks(CheckInput("X", {3, 4}, -4.0, 4.0), {-2.5, 2.5}, 0.05)}));
}

}  // namespace nabla::nn
