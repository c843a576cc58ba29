// round: Out = X rounded to the nearest integer, halves away from zero (std::round, as Paddle's Eigen
// round; not NumPy's half-to-even). Its gradient is zero (Paddle's round_grad reads Out@GRAD only).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(round) {
  RegisterActivation(
      registrar, "round", "Rounds X to the nearest integral value, elementwise; halves round away from zero.", __FILE__,
      __LINE__, {}, GradReads::kNothing, [](auto x, const auto&) { return std::round(x); },
      [](auto, auto dout, const auto&) { return decltype(dout)(0); })
      // Zero between the half-integers, where round jumps.
      .GradCheck(CheckCase("between_halves",
                           {AwayFromKinks(CheckInput("X", {2, 3}, -2.0, 2.0), {-1.5, -0.5, 0.5, 1.5}, 0.05)}));
}

}  // namespace
}  // namespace nabla::math_ops
