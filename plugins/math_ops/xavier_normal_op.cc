// xavier_normal: Glorot initialization. fan_in and fan_out come from the
// shape as ComputeFans (nabla/opkit/random.h) documents: [in, out] for 2-D weights.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(xavier_normal) {
  RegisterRandomOp(registrar, "xavier_normal",
                   "Out = values drawn from N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)) (Glorot and Bengio; "
                   "PyTorch's xavier_normal_). For a 2-D weight [in, out], fan_in = shape[0] and fan_out = shape[1].",
                   __FILE__, __LINE__,
                   [](const ExecutionContext& ctx) {
                     double std = XavierStd(ctx);
                     return [std](Rng& rng) { return rng.Normal(0.0, std); };
                   })
      .Attr<float>("gain", 1.0f, "(float, default 1.0) the scale factor of the bound");
}

}  // namespace
}  // namespace nabla::math_ops
