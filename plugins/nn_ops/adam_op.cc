// adam, in Paddle's form with the epsilon placement of PyTorch's Adam:
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   lr_t = LearningRate * sqrt(1 - Beta2Pow) / (1 - Beta1Pow)
//   ParamOut = Param - lr_t * m / (sqrt(v) + epsilon * sqrt(1 - Beta2Pow))
//   Beta1PowOut = Beta1Pow * beta1, Beta2PowOut = Beta2Pow * beta2
// Multiplying PyTorch's  p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// through by sqrt(1 - b2^t) gives exactly this, so the two agree step for
// step. Beta1Pow and Beta2Pow hold beta^t for the current step t: start them
// at beta1 and beta2 (one element each). Outputs may name their inputs.
// adamw (adamw_op.cc) is this step after a decoupled weight decay (adam.h).
#include <cmath>

#include "adam.h"
#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {

template <typename T>
void AdamStep(const ExecutionContext& ctx, double lr_ratio, double decay) {
  const Tensor& param = ctx.Input("Param");
  const Tensor& grad = ctx.Input("Grad");
  const Tensor& m1 = ctx.Input("Moment1");
  const Tensor& m2 = ctx.Input("Moment2");
  const double lr = lr_ratio * ReadScalar(ctx.Input("LearningRate"), ctx.Op().Type(), "LearningRate");
  const double b1p = ReadScalar(ctx.Input("Beta1Pow"), ctx.Op().Type(), "Beta1Pow");
  const double b2p = ReadScalar(ctx.Input("Beta2Pow"), ctx.Op().Type(), "Beta2Pow");
  const double beta1 = AdamBeta(ctx, "Beta1Tensor", "beta1");
  const double beta2 = AdamBeta(ctx, "Beta2Tensor", "beta2");
  const double eps = AdamEpsilon(ctx);
  const int64_t n = param.Numel();
  NABLA_ENFORCE(grad.Numel() == n && m1.Numel() == n && m2.Numel() == n, kInvalidArgument,
                "Grad, Moment1 and Moment2 must have Param's shape ", ShapeToString(param.GetShape()),
                ", but received ", ShapeToString(grad.GetShape()), ", ", ShapeToString(m1.GetShape()), " and ",
                ShapeToString(m2.GetShape()));
  NABLA_ENFORCE(b1p < 1.0 && b2p < 1.0, kInvalidArgument,
                "Beta1Pow and Beta2Pow must be below 1 (beta^t for step t >= 1), but received ", b1p, " and ", b2p);
  const double bc2 = std::sqrt(1.0 - b2p);
  const T lr_t = static_cast<T>(lr * bc2 / (1.0 - b1p));
  const T eps_t = static_cast<T>(eps * bc2);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  // Decoupled weight decay (adamw): Param * (1 - lr * coeff) before the step.
  const T keep = static_cast<T>(1.0 - lr * decay);
  const T* pp = param.Data<T>();
  const T* pg = grad.Data<T>();
  const T* pm1 = m1.Data<T>();
  const T* pm2 = m2.Data<T>();
  Device& dev = ctx.GetDevice();
  T* po = ctx.Output("ParamOut")->Allocate<T>(dev, param.GetShape());
  T* pm1o = ctx.Output("Moment1Out")->Allocate<T>(dev, m1.GetShape());
  T* pm2o = ctx.Output("Moment2Out")->Allocate<T>(dev, m2.GetShape());
  ParallelElementwise(n, [=](int64_t i) {
    const T g = pg[i];
    const T m = b1 * pm1[i] + (T(1) - b1) * g;
    const T v = b2 * pm2[i] + (T(1) - b2) * g * g;
    pm1o[i] = m;
    pm2o[i] = v;
    po[i] = (decay == 0.0 ? pp[i] : keep * pp[i]) - lr_t * m / (std::sqrt(v) + eps_t);
  });
  auto advance = [&dev, &ctx](const char* in_slot, const char* out_slot, double power, double beta) {
    Tensor* out = ctx.Output(out_slot);
    if (!out) return;
    const Tensor& in = ctx.Input(in_slot);
    out->Allocate(dev, in.GetDType(), in.GetShape());
    WriteScalar(*out, power * beta);
  };
  // use_global_beta_pow: another op advances the powers shared by all
  // parameters, so this one leaves them as they are.
  if (ctx.Attr<bool>("use_global_beta_pow")) return;
  advance("Beta1Pow", "Beta1PowOut", b1p, beta1);
  advance("Beta2Pow", "Beta2PowOut", b2p, beta2);
}

template void AdamStep<float>(const ExecutionContext& ctx, double lr_ratio, double decay);
template void AdamStep<double>(const ExecutionContext& ctx, double lr_ratio, double decay);

namespace {

template <typename T>
void AdamKernel(const ExecutionContext& ctx) {
  AdamStep<T>(ctx, 1.0, 0.0);
}

void InferAdam(InferShapeContext& c) {
  InferOptimizer(c, {"Moment1", "Moment2"});
  for (const char* slot : {"Beta1Pow", "Beta2Pow"}) {
    const int64_t n = NumElements(c.InputShape(slot));
    NABLA_ENFORCE(n == 1 || n < 0, kInvalidArgument, c.Where(), ": ", slot,
                  " must hold exactly one element, but received shape ", ShapeToString(c.InputShape(slot)));
    EnforceFloatDType(c.InputDType(slot), c.Where(), slot);
    if (c.HasOutput(std::string(slot) + "Out")) c.ShareShapeAndDType(slot, std::string(slot) + "Out");
  }
}

void CheckBeta(const float& b) {
  NABLA_ENFORCE(b >= 0.0f && b < 1.0f, kInvalidArgument, "attributes beta1 and beta2 must be in [0, 1), but received ",
                b);
}

}  // namespace

OpBuilder& AdamSchema(Registrar& registrar, const std::string& type, const char* file, int line) {
  return registrar.Op(type, file, line)
      .Precision(OpPrecision::kFloat32)
      .Input("Param", "(Tensor) the parameter, float32 or float64")
      .Input("Grad", "(Tensor) its gradient, shape and dtype of Param")
      .Input("LearningRate", "(Tensor) the learning rate, one float element")
      .Input("Moment1", "(Tensor) first moment, shape and dtype of Param (start from zeros)")
      .Input("Moment2", "(Tensor) second moment, shape and dtype of Param (start from zeros)")
      .Input("Beta1Pow", "(Tensor) beta1^t for this step t, one float element (start at beta1)")
      .Input("Beta2Pow", "(Tensor) beta2^t for this step t, one float element (start at beta2)")
      .Input("Beta1Tensor",
             "(Tensor<float32|float64>, optional) one element: beta1 at run time; before attribute beta1",
             kTensorAttrInput)
      .Input("Beta2Tensor",
             "(Tensor<float32|float64>, optional) one element: beta2 at run time; before attribute beta2",
             kTensorAttrInput)
      .Input("EpsilonTensor",
             "(Tensor<float32|float64>, optional) one element: epsilon at run time; before attribute epsilon",
             kTensorAttrInput)
      .Output("ParamOut", "(Tensor) the updated parameter; may be the same variable as Param")
      .Output("Moment1Out", "(Tensor) the updated first moment; may be Moment1")
      .Output("Moment2Out", "(Tensor) the updated second moment; may be Moment2")
      .Output("Beta1PowOut", "(Tensor) Beta1Pow * beta1 for the next step; may be Beta1Pow", kDispensable)
      .Output("Beta2PowOut", "(Tensor) Beta2Pow * beta2 for the next step; may be Beta2Pow", kDispensable)
      .Attr<float>("beta1", 0.9f, "(float, default 0.9) decay of the first moment", CheckBeta)
      .Attr<float>("beta2", 0.999f, "(float, default 0.999) decay of the second moment", CheckBeta)
      .Attr<float>("epsilon", 1e-8f, "(float, default 1e-8) added to the bias-corrected sqrt(v) for stability")
      .Attr<bool>("use_global_beta_pow", false,
                  "(bool, default false) Beta1PowOut and Beta2PowOut are left unwritten: another op advances the "
                  "powers that all parameters share")
      .Attr<bool>("lazy_mode", false,
                  "(bool, default false) Paddle's update of only the rows a sparse gradient has; gradients here are "
                  "dense, where it changes nothing")
      .Attr<int>("min_row_size_to_use_multithread", 1000,
                 "(int, default 1000) Paddle's threading threshold for sparse gradients; accepted and unused (the "
                 "update here splits over threads by its size)")
      .Attr<bool>("multi_precision", false,
                  "(bool, default false) Paddle's float16 parameter with a float32 MasterParam; must be false: "
                  "nabla keeps parameters float32 and its mixed precision casts around the ops instead",
                  [](const bool& on) {
                    NABLA_ENFORCE(!on, kUnimplemented,
                                  "attribute multi_precision must be false: nabla keeps parameters (and the "
                                  "optimizer state) float32, and --precision bf16 casts around the ops instead of "
                                  "keeping a MasterParam");
                  })
      .InferShape(InferAdam)
      .GradMaker<EmptyGradOpDescMaker>()
      .UpdatesInPlace();
}

NABLA_REGISTER_OPS(adam) {
  AdamSchema(registrar, "adam", __FILE__, __LINE__)
      .Doc(
          "Adam step (Kingma & Ba) with bias correction folded into the step size, numerically PyTorch's Adam "
          "(eps added to the bias-corrected sqrt(v)). An optimizer: no gradient.");
  RegisterFloatKernels(registrar, "adam", AdamKernel<float>, AdamKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
