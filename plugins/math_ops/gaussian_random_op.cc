// gaussian_random: a tensor of normally distributed random values.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(gaussian_random) {
  RegisterRandomOp(registrar, "gaussian_random", "Out = values drawn from the normal distribution N(mean, std^2).",
                   __FILE__, __LINE__,
                   [](const ExecutionContext& ctx) {
                     double mean = ctx.Attr<float>("mean"), std = ctx.Attr<float>("std");
                     NABLA_ENFORCE(std >= 0.0, kInvalidArgument,
                                   "op 'gaussian_random': expected std >= 0, but received ", std);
                     return [mean, std](Rng& rng) { return rng.Normal(mean, std); };
                   })
      .Attr<float>("mean", 0.0f, "(float, default 0.0) the mean")
      .Attr<float>("std", 1.0f, "(float, default 1.0) the standard deviation");
}

}  // namespace
}  // namespace nabla::math_ops
