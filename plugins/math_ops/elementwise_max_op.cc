// elementwise_max: Out = max(X, Y) with Paddle's axis broadcasting. Where
// X == Y the gradient is split evenly between them (PyTorch's rule), so the
// two parts still sum to dOut.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(elementwise_max) {
  RegisterElementwiseOp(
      registrar, "elementwise_max",
      "Out = max(X, Y) (elementwise). Y is broadcast onto X: its dims align with X's starting at `axis`. On ties "
      "each side gets half the gradient.",
      __FILE__, __LINE__, /*int_kernels=*/true, [](auto x, auto y) { return x > y ? x : y; },
      [](auto x, auto y, auto dout) { return x > y ? dout : (x == y ? dout / 2 : dout * 0); },
      [](auto x, auto y, auto dout) { return y > x ? dout : (x == y ? dout / 2 : dout * 0); })
      .GradCheck(TieFreeCase("same_shape", {2, 3}, {2, 3}, {-0.75, -0.25, 0.0, 0.2, 0.5, 0.9}))
      .GradCheck(TieFreeCase("broadcast_axis1", {2, 3, 2}, {3}, {-0.5, 0.1, 0.6}, {{"axis", 1}}));
}

}  // namespace
}  // namespace nabla::math_ops
