// sgd: ParamOut = Param - LearningRate * Grad. ParamOut may name the same
// variable as Param (the usual in-place update): every element is read
// before it is written.
#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void SgdKernel(const ExecutionContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  const Tensor& grad = ctx.Input("Grad");
  const T lr = static_cast<T>(ReadScalar(ctx.Input("LearningRate"), "sgd", "LearningRate"));
  NABLA_ENFORCE(grad.Numel() == param.Numel(), kInvalidArgument, "Grad must have Param's shape ",
                ShapeToString(param.GetShape()), ", but received ", ShapeToString(grad.GetShape()));
  const T* pp = param.Data<T>();
  const T* pg = grad.Data<T>();
  T* po = ctx.Output("ParamOut")->Allocate<T>(ctx.GetDevice(), param.GetShape());
  const int64_t n = param.Numel();
  ParallelElementwise(n, [=](int64_t i) { po[i] = pp[i] - lr * pg[i]; });
}

}  // namespace

NABLA_REGISTER_OPS(sgd) {
  registrar.Op("sgd", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .Doc("Stochastic gradient descent step: ParamOut = Param - LearningRate * Grad. An optimizer: no gradient.")
      .Input("Param", "(Tensor) the parameter, float32 or float64")
      .Input("Grad", "(Tensor) its gradient, shape and dtype of Param")
      .Input("LearningRate", "(Tensor) the learning rate, one float element")
      .Output("ParamOut", "(Tensor) the updated parameter; may be the same variable as Param")
      .InferShape([](InferShapeContext& c) { InferOptimizer(c, {}); })
      .GradMaker<EmptyGradOpDescMaker>()
      .UpdatesInPlace();
  RegisterFloatKernels(registrar, "sgd", SgdKernel<float>, SgdKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
