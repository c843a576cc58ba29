// relu6: Out = min(max(X, 0), threshold), elementwise. The gradient reads Out (Paddle's relu6_grad):
// Out@GRAD where 0 < Out < threshold, else 0.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(relu6) {
  RegisterActivation(
      registrar, "relu6", "Relu capped at threshold, elementwise: Out = min(max(X, 0), threshold).", __FILE__, __LINE__,
      {{"threshold", 6.0f, "(float, default 6.0) the upper bound"}}, GradReads::kOut,
      [](auto x, const auto& a) { return std::min(std::max(x, decltype(x)(0)), a[0]); },
      [](auto out, auto dout, const auto& a) {
        return (out > decltype(out)(0) && out < a[0]) ? dout : decltype(out)(0);
      })
      // The kinks at 0 and threshold have no derivative: the samples keep off them.
      .GradCheck(CheckCase("off_kinks", {AwayFromKinks(CheckInput("X", {3, 4}, -2.0, 8.0), {0.0, 6.0}, 0.05)}));
}

}  // namespace nabla::nn
