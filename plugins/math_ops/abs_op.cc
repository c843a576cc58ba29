// abs: Out = |X|, elementwise; its gradient at 0 is 0.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(abs) {
  RegisterUnaryOp(
      registrar, "abs", "Out = |X|, elementwise; its gradient at 0 is 0.", __FILE__, __LINE__, [](auto x) { return std::abs(x); },
      [](auto x, auto, auto dout) { return x > 0 ? dout : (x < 0 ? -dout : decltype(x)(0)); })
      // The kink at 0 has no derivative: keep the samples off it.
      .GradCheck(CheckCase("off_kink", {AwayFromKinks(CheckInput("X", {2, 3}), {0.0}, 0.05)}));
}

}  // namespace
}  // namespace nabla::math_ops
