// elementwise_add: Out = X + Y with Paddle's axis broadcasting.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(elementwise_add) {
  RegisterElementwiseOp(
      registrar, "elementwise_add",
      "Out = X + Y. Y is broadcast onto X: its dims align with X's starting at `axis` (see the axis attribute).",
      __FILE__, __LINE__, /*int_kernels=*/true, [](auto x, auto y) { return x + y; },
      [](auto, auto, auto dout) { return dout; }, [](auto, auto, auto dout) { return dout; })
      .GradCheck(CheckCase("same_shape", {CheckInput("X", {2, 3}), CheckInput("Y", {2, 3})}))
      .GradCheck(CheckCase("broadcast_axis1", {CheckInput("X", {2, 3, 4}), CheckInput("Y", {3})}, {{"axis", 1}}))
      .GradCheck(CheckCase("broadcast_trailing", {CheckInput("X", {2, 3, 4}), CheckInput("Y", {3, 4})}))
      .GradCheck(CheckCase("x_broadcast", {CheckInput("X", {4}), CheckInput("Y", {3, 4})}));
}

}  // namespace
}  // namespace nabla::math_ops
