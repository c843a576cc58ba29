// xavier_uniform: Glorot initialization. fan_in and fan_out come from the
// shape as ComputeFans (nabla/opkit/random.h) documents: [in, out] for 2-D weights.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(xavier_uniform) {
  RegisterRandomOp(
      registrar, "xavier_uniform",
      "Out = values drawn uniformly from [-limit, limit), limit = gain * sqrt(6 / (fan_in + fan_out)) (Glorot and "
      "Bengio; PyTorch's xavier_uniform_). For a 2-D weight [in, out], fan_in = shape[0] and fan_out = shape[1].",
      __FILE__, __LINE__,
      [](const ExecutionContext& ctx) {
        double limit = std::sqrt(3.0) * XavierStd(ctx);
        return [limit](Rng& rng) { return rng.Uniform(-limit, limit); };
      })
      .Attr<float>("gain", 1.0f, "(float, default 1.0) the scale factor of the bound");
}

}  // namespace
}  // namespace nabla::math_ops
