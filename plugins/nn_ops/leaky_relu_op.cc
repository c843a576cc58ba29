// leaky_relu: Out = X where X > 0, alpha * X elsewhere. The gradient reads X
// (alpha may be negative, so Out's sign does not tell the side).
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void LeakyReluKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
  const T* px = x.Data<T>();
  T* po = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  ParallelElementwise(x.Numel(), [=](int64_t i) { po[i] = px[i] > T(0) ? px[i] : alpha * px[i]; });
}

template <typename T>
void LeakyReluGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
  const T* px = x.Data<T>();
  const T* pd = ctx.Input(GradVarName("Out")).Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
  ParallelElementwise(x.Numel(), [=](int64_t i) { pdx[i] = px[i] > T(0) ? pd[i] : alpha * pd[i]; });
}

}  // namespace

NABLA_REGISTER_OPS(leaky_relu) {
  GradCheckSpec spec = CheckCase("kinks_avoided", {AwayFromKinks(CheckInput("X", {3, 4}), {0.0}, 0.01)});
  GradCheckSpec steep = spec;
  steep.name = "alpha_0.3";
  steep.attrs = {{"alpha", 0.3f}};
  registrar.Op("leaky_relu", __FILE__, __LINE__)
      .Doc("Leaky rectified linear unit, elementwise: Out = X where X > 0, else alpha * X.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) leaky_relu(X), shape and dtype of X")
      .Attr<float>("alpha", 0.02f, "(float, default 0.02) the slope for X <= 0")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<DefaultGradOpDescMaker>()
      .GradCheck(spec)
      .GradCheck(steep);
  registrar.DefaultGradOp("leaky_relu", __FILE__, __LINE__)
      .Doc("Gradient of leaky_relu: X@GRAD = Out@GRAD where X > 0, else alpha * Out@GRAD.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "X", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "leaky_relu", LeakyReluKernel<float>, LeakyReluKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "leaky_relu_grad", LeakyReluGradKernel<float>, LeakyReluGradKernel<double>, __FILE__,
                       __LINE__);
}

}  // namespace nabla::nn
