// rsqrt: Out = 1 / sqrt(X), elementwise (X > 0). The gradient reads Out (Paddle's rsqrt_grad):
// X@GRAD = -0.5 * Out@GRAD * Out^3.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(rsqrt) {
  RegisterActivation(
      registrar, "rsqrt", "Reciprocal square root, elementwise: Out = 1 / sqrt(X) (X > 0).", __FILE__, __LINE__, {},
      GradReads::kOut, [](auto x, const auto&) { return decltype(x)(1) / std::sqrt(x); },
      [](auto out, auto dout, const auto&) { return decltype(out)(-0.5) * dout * out * out * out; })
      // Away from 0, where the derivative is infinite.
      .GradCheck(CheckCase("positive", {CheckInput("X", {2, 3}, 0.5, 2.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
