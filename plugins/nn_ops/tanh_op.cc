// tanh: Out = tanh(X). The gradient reads Out: dX = dOut * (1 - Out^2).
#include <cmath>
#include <type_traits>

#include "nabla/cpu/cpu.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void TanhKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const T* px = x.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const int64_t n = x.Numel();
  if constexpr (std::is_same_v<T, float>) {
    // Vectorized (glibc's tanhf is scalar), chunk by chunk over the threads.
    cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) { cpu::Tanh(px + b, po + b, e - b); });
  } else {
    ParallelElementwise(n, [&](int64_t i) { po[i] = std::tanh(px[i]); });
  }
}

template <typename T>
void TanhGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& out = ctx.Input("Out");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const T* po = out.Data<T>();
  const T* pd = dout.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), out.GetShape());
  const int64_t n = out.Numel();
  ParallelElementwise(n, [&](int64_t i) { pdx[i] = pd[i] * (T(1) - po[i] * po[i]); });
}

}  // namespace

NABLA_REGISTER_OPS(tanh) {
  GradCheckSpec spec;
  spec.name = "wide_range";
  spec.inputs = {FloatIn("X", {3, 4}, -2.0, 2.0)};
  spec.outputs = {{"Out", 1}};
  registrar.Op("tanh", __FILE__, __LINE__)
      .Doc("Hyperbolic tangent: Out = tanh(X), elementwise.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) tanh(X), shape and dtype of X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<GradFromOutMaker>()
      .GradCheck(spec);
  registrar.DefaultGradOp("tanh", __FILE__, __LINE__)
      .Doc("Gradient of tanh: X@GRAD = Out@GRAD * (1 - Out^2).")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "Out", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "tanh", TanhKernel<float>, TanhKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "tanh_grad", TanhGradKernel<float>, TanhGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
