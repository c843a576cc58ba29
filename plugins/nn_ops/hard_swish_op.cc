// hard_swish: Out = X * min(max(X + offset, 0), threshold) / scale, elementwise (MobileNetV3).
// The gradient reads X (Paddle's hard_swish_grad): (2X + offset) / scale where 0 < X + offset < threshold,
// threshold / scale above, 0 below, times Out@GRAD.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(hard_swish) {
  RegisterActivation(
      registrar, "hard_swish",
      "Hard swish, elementwise: Out = X * min(max(X + offset, 0), threshold) / scale. threshold and scale should be "
      "positive.",
      __FILE__, __LINE__,
      {{"threshold", 6.0f, "(float, default 6.0) the cap of X + offset"},
       {"scale", 6.0f, "(float, default 6.0) the divisor"},
       {"offset", 3.0f, "(float, default 3.0) added to X before the clip"}},
      GradReads::kX,
      [](auto x, const auto& a) { return x * std::min(std::max(x + a[2], decltype(x)(0)), a[0]) / a[1]; },
      [](auto x, auto dout, const auto& a) {
        using T = decltype(x);
        // d/dX of X * c(X) / scale with c the clip: (c + X * c') / scale,
        // which is Paddle's three pieces for a positive threshold.
        const T s = x + a[2];
        const T c = std::min(std::max(s, T(0)), a[0]);
        return dout * (c + (s > T(0) && s < a[0] ? x : T(0))) / a[1];
      })
      // The kinks where X + offset is 0 or threshold: the samples keep off them.
      .GradCheck(CheckCase("off_kinks", {AwayFromKinks(CheckInput("X", {3, 4}, -5.0, 5.0), {-3.0, 3.0}, 0.05)}));
}

}  // namespace nabla::nn
