// softsign: Out = X / (1 + |X|), elementwise. The gradient reads X (Paddle's softsign_grad):
// X@GRAD = Out@GRAD / (1 + |X|)^2.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(softsign) {
  RegisterActivation(
      registrar, "softsign", "Softsign, elementwise: Out = X / (1 + |X|).", __FILE__, __LINE__, {}, GradReads::kX,
      [](auto x, const auto&) { return x / (decltype(x)(1) + std::abs(x)); },
      [](auto x, auto dout, const auto&) {
        const auto s = decltype(x)(1) + std::abs(x);
        return dout / (s * s);
      })
      .GradCheck(CheckCase("wide_range", {CheckInput("X", {3, 4}, -3.0, 3.0)}));
}

}  // namespace nabla::nn
