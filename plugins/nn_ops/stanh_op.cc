// stanh: Out = scale_b * tanh(scale_a * X), elementwise. The gradient reads X (Paddle's
// stanh_grad): X@GRAD = Out@GRAD * scale_a * scale_b * (1 - tanh(scale_a * X)^2).
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(stanh) {
  RegisterActivation(
      registrar, "stanh", "Scaled tanh, elementwise: Out = scale_b * tanh(scale_a * X).", __FILE__, __LINE__,
      {{"scale_a", 0.67f, "(float, default 0.67) the scale of X"},
       {"scale_b", 1.7159f, "(float, default 1.7159) the scale of the output"}},
      GradReads::kX, [](auto x, const auto& a) { return a[1] * std::tanh(a[0] * x); },
      [](auto x, auto dout, const auto& a) {
        using T = decltype(x);
        const T t = std::tanh(a[0] * x);
        return dout * a[0] * a[1] * (T(1) - t * t);
      })
      .GradCheck(CheckCase("wide_range", {CheckInput("X", {3, 4}, -3.0, 3.0)}));
}

}  // namespace nabla::nn
