// elementwise_div: Out = X / Y with Paddle's axis broadcasting.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(elementwise_div) {
  RegisterElementwiseOp(
      registrar, "elementwise_div",
      "Out = X / Y (elementwise). Y is broadcast onto X: its dims align with X's starting at `axis`.", __FILE__,
      __LINE__, /*int_kernels=*/false, [](auto x, auto y) { return x / y; },
      [](auto, auto y, auto dout) { return dout / y; }, [](auto x, auto y, auto dout) { return -dout * x / (y * y); })
      // Y stays away from 0, where the quotient blows up.
      .GradCheck(CheckCase("same_shape", {CheckInput("X", {2, 3}), CheckInput("Y", {2, 3}, 0.5, 2.0)}))
      .GradCheck(
          CheckCase("broadcast_axis1", {CheckInput("X", {2, 3, 2}), CheckInput("Y", {3}, 0.5, 2.0)}, {{"axis", 1}}));
}

}  // namespace
}  // namespace nabla::math_ops
