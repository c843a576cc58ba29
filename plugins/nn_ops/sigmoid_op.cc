// sigmoid: Out = 1 / (1 + exp(-X)). The gradient reads Out: dX = dOut * Out * (1 - Out).
#include <cmath>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

// Both branches only ever exponentiate a non-positive number, so neither
// overflows for large |x|.
template <typename T>
T StableSigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <typename T>
void SigmoidKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const T* px = x.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const int64_t n = x.Numel();
  ParallelElementwise(n, [&](int64_t i) { po[i] = StableSigmoid(px[i]); });
}

template <typename T>
void SigmoidGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& out = ctx.Input("Out");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const T* po = out.Data<T>();
  const T* pd = dout.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), out.GetShape());
  const int64_t n = out.Numel();
  ParallelElementwise(n, [&](int64_t i) { pdx[i] = pd[i] * po[i] * (T(1) - po[i]); });
}

}  // namespace

NABLA_REGISTER_OPS(sigmoid) {
  GradCheckSpec spec;
  spec.name = "wide_range";
  spec.inputs = {FloatIn("X", {3, 4}, -4.0, 4.0)};
  spec.outputs = {{"Out", 1}};
  registrar.Op("sigmoid", __FILE__, __LINE__)
      .Doc("Logistic sigmoid: Out = 1 / (1 + exp(-X)), elementwise, computed without overflow for large |X|.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) sigmoid(X), shape and dtype of X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<GradFromOutMaker>()
      .GradCheck(spec);
  registrar.DefaultGradOp("sigmoid", __FILE__, __LINE__)
      .Doc("Gradient of sigmoid: X@GRAD = Out@GRAD * Out * (1 - Out).")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "Out", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "sigmoid", SigmoidKernel<float>, SigmoidKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "sigmoid_grad", SigmoidGradKernel<float>, SigmoidGradKernel<double>, __FILE__,
                       __LINE__);
}

}  // namespace nabla::nn
