// momentum (Paddle's momentum op):
//   g = Grad * rescale_grad (+ regularization_coeff * Param with "l2_decay")
//   VelocityOut = mu * Velocity + g
//   ParamOut = Param - LearningRate * (g + mu * VelocityOut)   with use_nesterov
//   ParamOut = Param - LearningRate * VelocityOut              otherwise
// This is PyTorch's SGD(momentum=mu, nesterov=..., dampening=0) update.
// Outputs may name their inputs (in place).
#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void MomentumKernel(const ExecutionContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  const Tensor& grad = ctx.Input("Grad");
  const Tensor& velocity = ctx.Input("Velocity");
  const T lr = static_cast<T>(ReadScalar(ctx.Input("LearningRate"), "momentum", "LearningRate"));
  const T mu = static_cast<T>(ctx.Attr<float>("mu"));
  const bool nesterov = ctx.Attr<bool>("use_nesterov");
  const T decay = ctx.Attr<std::string>("regularization_method") == "l2_decay"
                      ? static_cast<T>(ctx.Attr<float>("regularization_coeff"))
                      : T(0);
  const T rescale = static_cast<T>(ctx.Attr<float>("rescale_grad"));
  const int64_t n = param.Numel();
  NABLA_ENFORCE(grad.Numel() == n && velocity.Numel() == n, kInvalidArgument,
                "Grad and Velocity must have Param's shape ", ShapeToString(param.GetShape()), ", but received ",
                ShapeToString(grad.GetShape()), " and ", ShapeToString(velocity.GetShape()));
  const T* pp = param.Data<T>();
  const T* pg = grad.Data<T>();
  const T* pv = velocity.Data<T>();
  T* po = ctx.Output("ParamOut")->Allocate<T>(ctx.GetDevice(), param.GetShape());
  T* pvo = ctx.Output("VelocityOut")->Allocate<T>(ctx.GetDevice(), velocity.GetShape());
  ParallelElementwise(n, [=](int64_t i) {
    const T p = pp[i];
    const T g = pg[i] * rescale + decay * p;
    const T v = mu * pv[i] + g;
    pvo[i] = v;
    po[i] = nesterov ? p - lr * (g + mu * v) : p - lr * v;
  });
}

}  // namespace

NABLA_REGISTER_OPS(momentum) {
  registrar.Op("momentum", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .Doc(
          "Momentum SGD step (heavy-ball or Nesterov), optionally with L2 weight decay folded into the "
          "gradient. An optimizer: no gradient.")
      .Input("Param", "(Tensor) the parameter, float32 or float64")
      .Input("Grad", "(Tensor) its gradient, shape and dtype of Param")
      .Input("Velocity", "(Tensor) the accumulated velocity, shape and dtype of Param (start from zeros)")
      .Input("LearningRate", "(Tensor) the learning rate, one float element")
      .Output("ParamOut", "(Tensor) the updated parameter; may be the same variable as Param")
      .Output("VelocityOut", "(Tensor) the updated velocity; may be the same variable as Velocity")
      .RequiredAttr<float>("mu", "(float, required) the momentum coefficient")
      .Attr<bool>("use_nesterov", false, "(bool, default false) use Nesterov's lookahead update")
      .Attr<std::string>("regularization_method", "",
                         "(string, default \"\") \"l2_decay\" adds regularization_coeff * Param to the gradient; "
                         "\"\" adds nothing",
                         [](const std::string& s) {
                           NABLA_ENFORCE(s.empty() || s == "l2_decay", kInvalidArgument,
                                         "attribute regularization_method must be \"\" or \"l2_decay\", but "
                                         "received \"",
                                         s, "\"");
                         })
      .Attr<float>("regularization_coeff", 0.0f, "(float, default 0.0) the L2 decay coefficient")
      .Attr<float>("rescale_grad", 1.0f, "(float, default 1.0) multiplies Grad before anything else")
      .InferShape([](InferShapeContext& c) { InferOptimizer(c, {"Velocity"}); })
      .GradMaker<EmptyGradOpDescMaker>()
      .UpdatesInPlace();
  RegisterFloatKernels(registrar, "momentum", MomentumKernel<float>, MomentumKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
