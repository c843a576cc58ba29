// gelu: Out = X * Phi(X), Phi the standard normal CDF (erf form), or its tanh
// approximation when `approximate`. The gradient reads X.
#include <cmath>
#include <type_traits>

#include "nabla/opkit/gelu.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kCubic = 0.044715;

// float32 on the backend's vector math (cpu::Gelu), float64 on libm.
template <typename T>
void GeluKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* px = x.Data<T>();
  T* po = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const bool approximate = ctx.Attr<bool>("approximate");
  if constexpr (std::is_same_v<T, float>) {
    cpu::ParallelFor(x.Numel(), cpu::kParallelGrain,
                     [&](int64_t b, int64_t e) { cpu::Gelu(px + b, po + b, e - b, approximate); });
  } else if (approximate) {
    ParallelElementwise(x.Numel(), [&](int64_t i) {
      const T v = px[i];
      po[i] = T(0.5) * v * (T(1) + std::tanh(T(kSqrt2OverPi) * (v + T(kCubic) * v * v * v)));
    });
  } else {
    ParallelElementwise(x.Numel(), [&](int64_t i) { po[i] = opkit::GeluErf(px[i]); });
  }
}

template <typename T>
void GeluGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  const T* px = x.Data<T>();
  const T* pd = ctx.Input(GradVarName("Out")).Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const bool approximate = ctx.Attr<bool>("approximate");
  if constexpr (std::is_same_v<T, float>) {
    cpu::ParallelFor(x.Numel(), cpu::kParallelGrain,
                     [&](int64_t b, int64_t e) { cpu::GeluGrad(px + b, pd + b, pdx + b, e - b, approximate); });
  } else if (approximate) {
    ParallelElementwise(x.Numel(), [&](int64_t i) {
      const T v = px[i];
      const T t = std::tanh(T(kSqrt2OverPi) * (v + T(kCubic) * v * v * v));
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * v * v);
      pdx[i] = pd[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    });
  } else {
    ParallelElementwise(x.Numel(), [&](int64_t i) { pdx[i] = pd[i] * opkit::GeluErfGrad(px[i]); });
  }
}

}  // namespace

NABLA_REGISTER_OPS(gelu) {
  GradCheckSpec erf_form = CheckCase("erf_form", {CheckInput("X", {3, 4}, -3.0, 3.0)});
  GradCheckSpec tanh_form = erf_form;
  tanh_form.name = "tanh_form";
  tanh_form.attrs = {{"approximate", true}};
  registrar.Op("gelu", __FILE__, __LINE__)
      .Doc(
          "Gaussian error linear unit, elementwise: Out = 0.5 X (1 + erf(X / sqrt(2))), or with `approximate` "
          "Out = 0.5 X (1 + tanh(sqrt(2 / pi) (X + 0.044715 X^3))).")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) gelu(X), shape and dtype of X")
      .Attr<bool>("approximate", false, "(bool, default false) use the tanh approximation instead of erf")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<DefaultGradOpDescMaker>()
      .GradCheck(erf_form)
      .GradCheck(tanh_form);
  registrar.DefaultGradOp("gelu", __FILE__, __LINE__)
      .Doc("Gradient of gelu: X@GRAD = Out@GRAD * d gelu / dX, in the form `approximate` selects.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "X", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "gelu", GeluKernel<float>, GeluKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "gelu_grad", GeluGradKernel<float>, GeluGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
