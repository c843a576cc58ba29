// hard_shrink: Out = X where X < -threshold or X > threshold, else 0 (Paddle's form after its
// hard_shrink checkpoint, which counts a point on both sides once). The gradient reads X.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(hard_shrink) {
  GradCheckSpec wide = CheckCase(
      "threshold_1.2", {AwayFromKinks(CheckInput("X", {3, 4}, -2.0, 2.0), {-1.2, 1.2}, 0.02)}, {{"threshold", 1.2f}});
  RegisterActivation(
      registrar, "hard_shrink", "Hard shrink, elementwise: Out = X where |X| > threshold, else 0.", __FILE__, __LINE__,
      {{"threshold", 0.5f, "(float, default 0.5) values within [-threshold, threshold] become 0"}}, GradReads::kX,
      [](auto x, const auto& a) { return (x < -a[0] || x > a[0]) ? x : decltype(x)(0); },
      [](auto x, auto dout, const auto& a) { return (x < -a[0] || x > a[0]) ? dout : decltype(x)(0); })
      // The jumps at +-threshold have no derivative: the samples keep off them.
      .GradCheck(CheckCase("off_thresholds", {AwayFromKinks(CheckInput("X", {3, 4}), {-0.5, 0.5}, 0.02)}))
      .GradCheck(wide);
}

}  // namespace nabla::nn
