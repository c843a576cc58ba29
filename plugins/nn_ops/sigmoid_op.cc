// sigmoid: Out = 1 / (1 + exp(-X)). The gradient reads Out: dX = dOut * Out * (1 - Out).
#include <cmath>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void SigmoidKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const T* px = x.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const int64_t n = x.Numel();
  ParallelElementwise(n, [&](int64_t i) { po[i] = Sigmoid(px[i]); });
}

}  // namespace

NABLA_REGISTER_OPS(sigmoid) {
  GradCheckSpec spec = CheckCase("wide_range", {CheckInput("X", {3, 4}, -4.0, 4.0)});
  registrar.Op("sigmoid", __FILE__, __LINE__)
      .Doc("Logistic sigmoid: Out = 1 / (1 + exp(-X)), elementwise, computed without overflow for large |X|.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) sigmoid(X), shape and dtype of X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<GradFromOutMaker>()
      .GradCheck(spec);
  RegisterGradFromOut(registrar, "sigmoid", "Gradient of sigmoid: X@GRAD = Out@GRAD * Out * (1 - Out).", __FILE__,
                      __LINE__, [](auto o, auto d) { return d * o * (decltype(o)(1) - o); });
  RegisterFloatKernels(registrar, "sigmoid", SigmoidKernel<float>, SigmoidKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
