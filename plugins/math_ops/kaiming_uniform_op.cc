// kaiming_uniform: He initialization. The fan comes from the shape as
// ComputeFans (nabla/opkit/random.h) documents: [in, out] for 2-D weights.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(kaiming_uniform) {
  KaimingAttrs(RegisterRandomOp(
      registrar, "kaiming_uniform",
      "Out = values drawn uniformly from [-bound, bound), bound = gain * sqrt(3 / fan) (He et al.; PyTorch's "
      "kaiming_uniform_). gain = sqrt(2 / (1 + negative_slope^2)); fan is fan_in or fan_out per mode, "
      "and for a 2-D weight [in, out] fan_in = shape[0], fan_out = shape[1].",
      __FILE__, __LINE__, [](const ExecutionContext& ctx) {
        double bound = std::sqrt(3.0) * KaimingStd(ctx);
        return [bound](Rng& rng) { return rng.Uniform(-bound, bound); };
      }));
}

}  // namespace
}  // namespace nabla::math_ops
