// swish: Out = X * sigmoid(beta * X), elementwise. The gradient reads X (Paddle's swish_grad):
// X@GRAD = Out@GRAD * (s + beta * X * s * (1 - s)), s = sigmoid(beta * X).
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(swish) {
  GradCheckSpec steep = CheckCase("beta_2", {CheckInput("X", {3, 4}, -3.0, 3.0)}, {{"beta", 2.0f}});
  RegisterActivation(
      registrar, "swish", "Swish, elementwise: Out = X / (1 + e^(-beta * X)).", __FILE__, __LINE__,
      {{"beta", 1.0f, "(float, default 1.0) the constant beta"}}, GradReads::kX,
      [](auto x, const auto& a) { return x * Sigmoid(a[0] * x); },
      [](auto x, auto dout, const auto& a) {
        using T = decltype(x);
        const T s = Sigmoid(a[0] * x);
        return dout * (s + a[0] * x * s * (T(1) - s));
      })
      .GradCheck(CheckCase("wide_range", {CheckInput("X", {3, 4}, -4.0, 4.0)}))
      .GradCheck(steep);
}

}  // namespace nabla::nn
