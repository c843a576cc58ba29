// brelu: Out = min(max(X, t_min), t_max), elementwise (a bounded relu). The gradient reads X
// (Paddle's brelu_grad): Out@GRAD where t_min < X < t_max, else 0.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(brelu) {
  GradCheckSpec tight =
      CheckCase("t_min_-1_t_max_1", {AwayFromKinks(CheckInput("X", {3, 4}, -2.0, 2.0), {-1.0, 1.0}, 0.02)},
                {{"t_min", -1.0f}, {"t_max", 1.0f}});
  RegisterActivation(
      registrar, "brelu", "Bounded relu, elementwise: Out = min(max(X, t_min), t_max).", __FILE__, __LINE__,
      {{"t_min", 0.0f, "(float, default 0.0) the lower bound"},
       {"t_max", 24.0f, "(float, default 24.0) the upper bound"}},
      GradReads::kX, [](auto x, const auto& a) { return std::min(std::max(x, a[0]), a[1]); },
      [](auto x, auto dout, const auto& a) { return (x > a[0] && x < a[1]) ? dout : decltype(x)(0); })
      // The kinks at t_min and t_max have no derivative: the samples keep off them.
      .GradCheck(CheckCase("defaults", {AwayFromKinks(CheckInput("X", {3, 4}, -2.0, 26.0), {0.0, 24.0}, 0.05)}))
      .GradCheck(tight);
}

}  // namespace nabla::nn
