// sqrt: Out = sqrt(X), elementwise (X >= 0).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(sqrt) {
  RegisterUnaryOp(
      registrar, "sqrt", "Out = sqrt(X), elementwise (X >= 0).", __FILE__, __LINE__, [](auto x) { return std::sqrt(x); },
      [](auto, auto out, auto dout) { return dout * decltype(out)(0.5) / out; })
      // Away from 0, where the derivative is infinite.
      .GradCheck(CheckCase("positive", {CheckInput("X", {2, 3}, 0.5, 2.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
