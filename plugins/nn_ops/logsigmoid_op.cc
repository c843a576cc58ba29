// logsigmoid: Out = log(1 / (1 + e^-X)) = -softplus(-X), elementwise, computed as
// min(X, 0) - log1p(e^-|X|) so that no |X| overflows. The gradient reads X (Paddle's
// logsigmoid_grad): X@GRAD = Out@GRAD * sigmoid(-X).
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(logsigmoid) {
  RegisterActivation(
      registrar, "logsigmoid",
      "Log-sigmoid, elementwise: Out = log(1 / (1 + e^-X)), computed without overflow for large |X|.", __FILE__,
      __LINE__, {}, GradReads::kX, [](auto x, const auto&) { return -Softplus(-x); },
      [](auto x, auto dout, const auto&) { return dout * Sigmoid(-x); })
      .GradCheck(CheckCase("moderate", {CheckInput("X", {3, 4}, -4.0, 4.0)}))
      .GradCheck(CheckCase("large", {CheckInput("X", {3, 4}, -30.0, 30.0)}));
}

}  // namespace nabla::nn
