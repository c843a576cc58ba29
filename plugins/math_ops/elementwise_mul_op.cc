// elementwise_mul: Out = X * Y with Paddle's axis broadcasting.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(elementwise_mul) {
  RegisterElementwiseOp(
      registrar, "elementwise_mul",
      "Out = X * Y (elementwise). Y is broadcast onto X: its dims align with X's starting at `axis`.", __FILE__,
      __LINE__, /*int_kernels=*/true, [](auto x, auto y) { return x * y; },
      [](auto, auto y, auto dout) { return dout * y; }, [](auto x, auto, auto dout) { return dout * x; })
      .GradCheck(CheckCase("same_shape", {CheckInput("X", {2, 3}), CheckInput("Y", {2, 3})}))
      .GradCheck(CheckCase("broadcast_axis1", {CheckInput("X", {2, 3, 2}), CheckInput("Y", {3})}, {{"axis", 1}}))
      .GradCheck(CheckCase("scalar_y", {CheckInput("X", {2, 3}), CheckInput("Y", {1})}));
}

}  // namespace
}  // namespace nabla::math_ops
