// tanh_shrink: Out = X - tanh(X), elementwise. The gradient reads X (Paddle's
// tanh_shrink_grad): X@GRAD = Out@GRAD * tanh(X)^2.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(tanh_shrink) {
  RegisterActivation(
      registrar, "tanh_shrink", "Tanh shrink, elementwise: Out = X - tanh(X).", __FILE__, __LINE__, {}, GradReads::kX,
      [](auto x, const auto&) { return x - std::tanh(x); },
      [](auto x, auto dout, const auto&) {
        const auto t = std::tanh(x);
        return dout * t * t;
      })
      .GradCheck(CheckCase("wide_range", {CheckInput("X", {3, 4}, -3.0, 3.0)}));
}

}  // namespace nabla::nn
