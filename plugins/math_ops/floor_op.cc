// floor: Out = the largest integer <= X, elementwise. Its gradient is zero (Paddle's floor_grad reads
// Out@GRAD only and writes zeros), so training passes nothing through it.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(floor) {
  RegisterActivation(
      registrar, "floor", "Floor, elementwise: Out = the largest integral value not greater than X.", __FILE__,
      __LINE__, {}, GradReads::kNothing, [](auto x, const auto&) { return std::floor(x); },
      [](auto, auto dout, const auto&) { return decltype(dout)(0); })
      // Zero between the integers, where floor jumps.
      .GradCheck(CheckCase("between_integers",
                           {AwayFromKinks(CheckInput("X", {2, 3}, -2.0, 2.0), {-2.0, -1.0, 0.0, 1.0, 2.0}, 0.05)}));
}

}  // namespace
}  // namespace nabla::math_ops
