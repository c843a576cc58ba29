// kaiming_normal: He initialization. The fan comes from the shape as
// ComputeFans (nabla/opkit/random.h) documents: [in, out] for 2-D weights.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(kaiming_normal) {
  KaimingAttrs(
      RegisterRandomOp(registrar, "kaiming_normal",
                       "Out = values drawn from N(0, std^2), std = gain / sqrt(fan) (He et al.; PyTorch's "
                       "kaiming_normal_). gain = sqrt(2 / (1 + negative_slope^2)); fan is fan_in or fan_out per mode, "
                       "and for a 2-D weight [in, out] fan_in = shape[0], fan_out = shape[1].",
                       __FILE__, __LINE__, [](const ExecutionContext& ctx) {
                         double std = KaimingStd(ctx);
                         return [std](Rng& rng) { return rng.Normal(0.0, std); };
                       }));
}

}  // namespace
}  // namespace nabla::math_ops
