// soft_relu: Out = ln(1 + e^clip(X, -threshold, threshold)), elementwise. The gradient reads Out
// (Paddle's soft_relu_grad): Out@GRAD * (1 - e^-Out) inside the clip, 0 outside. Paddle finds the inside
// by -threshold < Out < threshold, which holds only where softplus(threshold) rounds to threshold (the
// default 40); here it is softplus(-threshold) < Out < softplus(threshold), the same X range exactly,
// since softplus is increasing and computes both sides.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(soft_relu) {
  GradCheckSpec tight = CheckCase("threshold_1", {AwayFromKinks(CheckInput("X", {3, 4}, -2.0, 2.0), {-1.0, 1.0}, 0.02)},
                                  {{"threshold", 1.0f}});
  RegisterActivation(
      registrar, "soft_relu", "Soft relu, elementwise: Out = ln(1 + e^clip(X, -threshold, threshold)).", __FILE__,
      __LINE__, {{"threshold", 40.0f, "(float, default 40.0) X is clipped to [-threshold, threshold]"}},
      GradReads::kOut, [](auto x, const auto& a) { return Softplus(std::min(std::max(x, -a[0]), a[0])); },
      [](auto out, auto dout, const auto& a) {
        using T = decltype(out);
        // 1 - e^-Out is sigmoid of the clipped X; expm1 keeps it where Out is tiny.
        return (out > Softplus(-a[0]) && out < Softplus(a[0])) ? -dout * std::expm1(-out) : T(0);
      })
      .GradCheck(CheckCase("inside_clip", {CheckInput("X", {3, 4}, -3.0, 3.0)}))
      .GradCheck(tight);
}

}  // namespace nabla::nn
