// elementwise_pow: Out = X ^ Y with Paddle's axis broadcasting.
// dX = dOut * Y * X^(Y-1); dY = dOut * Out * log(X), taken as 0 where X == 0
// and Y >= 0 (PyTorch's rule: the limit of x^y log x as x -> 0+).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

template <typename T>
T Pow(T x, T y) {
  return static_cast<T>(std::pow(x, y));
}

NABLA_REGISTER_OPS(elementwise_pow) {
  RegisterElementwiseOp(
      registrar, "elementwise_pow",
      "Out = X ^ Y (elementwise). Y is broadcast onto X: its dims align with X's starting at `axis`.", __FILE__,
      __LINE__, /*int_kernels=*/true, [](auto x, auto y) { return Pow(x, y); },
      [](auto x, auto y, auto dout) { return dout * y * Pow(x, y - 1); },
      [](auto x, auto y, auto dout) {
        using T = decltype(x);
        return x == T(0) && y >= T(0) ? T(0) : dout * Pow(x, y) * static_cast<T>(std::log(x));
      })
      // X stays positive, where X^Y is smooth in both operands.
      .GradCheck(CheckCase("same_shape", {CheckInput("X", {2, 3}, 0.5, 2.0), CheckInput("Y", {2, 3}, -1.5, 1.5)}))
      .GradCheck(CheckCase("broadcast_axis1", {CheckInput("X", {2, 3, 2}, 0.5, 2.0), CheckInput("Y", {3}, -2.0, 2.0)},
                           {{"axis", 1}}))
      .GradCheck(CheckCase("scalar_exponent", {CheckInput("X", {4}, 0.5, 2.0), CheckInput("Y", {1}, 1.0, 3.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
