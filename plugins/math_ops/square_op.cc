// square: Out = X * X, elementwise.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(square) {
  RegisterUnaryOp(
      registrar, "square", "Out = X * X, elementwise.", __FILE__, __LINE__, [](auto x) { return x * x; },
      [](auto x, auto, auto dout) { return dout * decltype(x)(2) * x; })
      .GradCheck(CheckCase("matrix", {CheckInput("X", {2, 3}, -2.0, 2.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
