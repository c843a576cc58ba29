// adamw (Paddle's): Loshchilov & Hutter's decoupled weight decay, then
// adam's step (adam_op.cc), both with the rate LearningRate * lr_ratio:
//   Param' = Param * (1 - lr * lr_ratio * coeff)    (when with_decay)
//   then adam on Param' -- PyTorch's AdamW step for step.
#include "adam.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void AdamWKernel(const ExecutionContext& ctx) {
  const double decay = ctx.Attr<bool>("with_decay") ? ctx.Attr<float>("coeff") : 0.0;
  AdamStep<T>(ctx, ctx.Attr<float>("lr_ratio"), decay);
}

}  // namespace

NABLA_REGISTER_OPS(adamw) {
  AdamSchema(registrar, "adamw", __FILE__, __LINE__)
      .Doc(
          "AdamW step: Param *= 1 - lr * lr_ratio * coeff (decoupled weight decay, when with_decay), then adam's "
          "step with the rate lr * lr_ratio; numerically PyTorch's AdamW. An optimizer: no gradient.")
      .Attr<float>("coeff", 0.01f, "(float, default 0.01) the weight decay coefficient",
                   [](const float& c) {
                     NABLA_ENFORCE(c >= 0.0f, kInvalidArgument, "attribute coeff must be >= 0, but received ", c);
                   })
      .Attr<float>("lr_ratio", 1.0f, "(float, default 1.0) multiplies LearningRate (per-parameter rate scaling)",
                   [](const float& r) {
                     NABLA_ENFORCE(r >= 0.0f, kInvalidArgument, "attribute lr_ratio must be >= 0, but received ", r);
                   })
      .Attr<bool>("with_decay", false, "(bool, default false) apply the weight decay (Paddle's default is off)");
  RegisterFloatKernels(registrar, "adamw", AdamWKernel<float>, AdamWKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
