// thresholded_relu: Out = X where X > threshold, else 0, elementwise. The gradient reads X
// (Paddle's thresholded_relu_grad): Out@GRAD where X > threshold, else 0.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(thresholded_relu) {
  RegisterActivation(
      registrar, "thresholded_relu", "Thresholded relu, elementwise: Out = X where X > threshold, else 0.", __FILE__,
      __LINE__, {{"threshold", 1.0f, "(float, default 1.0) the threshold location"}}, GradReads::kX,
      [](auto x, const auto& a) { return x > a[0] ? x : decltype(x)(0); },
      [](auto x, auto dout, const auto& a) { return x > a[0] ? dout : decltype(x)(0); })
      // The jump at threshold has no derivative: the samples keep off it.
      .GradCheck(CheckCase("off_threshold", {AwayFromKinks(CheckInput("X", {3, 4}, -3.0, 3.0), {1.0}, 0.02)}));
}

}  // namespace nabla::nn
