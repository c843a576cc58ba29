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

}  // namespace

NABLA_REGISTER_OPS(tanh) {
  GradCheckSpec spec = CheckCase("wide_range", {CheckInput("X", {3, 4}, -2.0, 2.0)});
  registrar.Op("tanh", __FILE__, __LINE__)
      .Doc("Hyperbolic tangent: Out = tanh(X), elementwise.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) tanh(X), shape and dtype of X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<GradFromOutMaker>()
      .GradCheck(spec);
  RegisterGradFromOut(registrar, "tanh", "Gradient of tanh: X@GRAD = Out@GRAD * (1 - Out^2).", __FILE__, __LINE__,
                      [](auto o, auto d) { return d * (decltype(o)(1) - o * o); });
  RegisterFloatKernels(registrar, "tanh", TanhKernel<float>, TanhKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
