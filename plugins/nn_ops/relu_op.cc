// relu: Out = max(X, 0). The gradient reads Out, not X (Paddle's relu_grad).
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void ReluKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const T* px = x.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const int64_t n = x.Numel();
  // Pointers captured by value and both operands loaded unconditionally, so
  // the loop compiles to a branch-free vector select: a branch on the sign
  // of random data mispredicts half the time. NaN stays NaN (as PyTorch and
  // Paddle's max(X, 0)).
  cpu::ParallelFor(n, cpu::kParallelGrain, [px, po](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T v = px[i];
      po[i] = v < T(0) ? T(0) : v;
    }
  });
}

}  // namespace

NABLA_REGISTER_OPS(relu) {
  GradCheckSpec spec = CheckCase("kinks_avoided", {AwayFromKinks(CheckInput("X", {3, 4}), {0.0}, 0.01)});
  registrar.Op("relu", __FILE__, __LINE__)
      .Doc("Rectified linear unit: Out = max(X, 0), elementwise; NaN stays NaN.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) max(X, 0), shape and dtype of X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<GradFromOutMaker>()
      .GradCheck(spec);
  RegisterGradFromOut(registrar, "relu", "Gradient of relu: X@GRAD = Out@GRAD where Out > 0, else 0.", __FILE__,
                      __LINE__, [](auto o, auto d) { return o > decltype(o)(0) ? d : decltype(o)(0); });
  RegisterFloatKernels(registrar, "relu", ReluKernel<float>, ReluKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
