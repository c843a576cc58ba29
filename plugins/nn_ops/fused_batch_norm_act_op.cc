// fused_batch_norm_act: Y = act(batch_norm(X)), Paddle's fused op for the
// batch_norm + relu of conv-bn-relu blocks; act_type is relu. FuseOps
// replaces batch_norm followed by relu by this op where the normalized X has
// no other reader. The forward writes Y once instead of writing the
// normalized X and rereading it; the gradient masks Y@GRAD by Y > 0 as its
// passes read it, so relu_grad's pass and its tensor go too. Both compute
// bit for bit what batch_norm and relu compute (batch_norm.h).
#include "batch_norm.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

// batch_norm(X, ...) -> Y = n, then relu(X = n) -> Out = h becomes
// fused_batch_norm_act(X, ...) -> Y = h, the statistics outputs as they were.
std::unique_ptr<OpDesc> FuseBatchNormRelu(const std::vector<const OpDesc*>& m) {
  const OpDesc& bn = *m[0];
  const OpDesc& relu = *m[1];
  if (relu.Input("X") != bn.Output("Y")) return nullptr;  // a relu of the statistics
  VarNameMap outputs = bn.Outputs();
  outputs["Y"] = relu.Output("Out");
  AttributeMap attrs = bn.Attrs();
  attrs["act_type"] = std::string("relu");
  return std::make_unique<OpDesc>("fused_batch_norm_act", bn.Inputs(), std::move(outputs), std::move(attrs));
}

// X and the per-channel values fixed so that every normalized value is at
// least 0.1 from relu's kink: no central difference straddles it, and both
// sides of it are checked (some values are below 0).
GradCheckSpec KinkFreeCase() {
  GradCheckSpec s = BnCase("train_nchw_relu", {3, 2, 2, 2}, {{"act_type", std::string("relu")}});
  s.inputs[0].values = {1.5, -0.7, 0.2,  1.1, -1.8, 0.6, 1.3, -0.9, 0.6, -1.4, 0.9, 0.0,
                        1.7, -0.3, -1.1, 0.8, -0.6, 1.9, 0.3, -1.6, 1.2, -0.2, 0.5, -1.0};
  s.inputs[1].values = {0.8, 1.3};    // Scale
  s.inputs[2].values = {0.25, -0.4};  // Bias
  return s;
}

}  // namespace

NABLA_REGISTER_OPS(fused_batch_norm_act) {
  BatchNormSchema(registrar, "fused_batch_norm_act",
                  "Y = act(batch_norm(X)) with act_type relu: batch_norm's normalization and statistics, then relu, "
                  "in one op. Chosen by the fusion pass for batch_norm followed by relu.",
                  "(Tensor) relu of the normalized X, X's shape and dtype", __FILE__, __LINE__)
      .Attr<std::string>("act_type", "relu", "(string, default \"relu\") the activation after the normalization: relu",
                         [](const std::string& act) {
                           NABLA_ENFORCE(act == "relu", kInvalidArgument,
                                         "attribute act_type must be relu, but received '", act, "'");
                         })
      .Fuses(FusionPattern{{"batch_norm", "relu"}, FuseBatchNormRelu})
      .GradCheck(KinkFreeCase());
  BatchNormGradSchema(registrar, "fused_batch_norm_act",
                      "Gradient of fused_batch_norm_act with respect to X, Scale and Bias: batch_norm_grad of "
                      "Y@GRAD where Y > 0, else 0.",
                      __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "fused_batch_norm_act", BatchNormKernel<float, true>, BatchNormKernel<double, true>,
                       __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "fused_batch_norm_act_grad", BatchNormGradKernel<float, true>,
                       BatchNormGradKernel<double, true>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
