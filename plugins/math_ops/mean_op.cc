// mean: the mean of every element of X, as a one-element tensor (the usual
// last op of a loss). The mean of no elements is NaN (0 / 0), as Paddle's
// mean_all kernel, NumPy and PyTorch give it.
#include <limits>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

template <typename T>
struct MeanKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const T* xd = x.Data<T>();
    int64_t n = x.Numel();
    // Fixed blocks summed in order: the same bits with any --threads.
    double acc = DeterministicSum<double>(n, [&](int64_t i) { return static_cast<double>(xd[i]); });
    AllocOutput<T>(ctx, ctx.Output("Out"), {1})[0] =
        n > 0 ? static_cast<T>(acc / static_cast<double>(n)) : std::numeric_limits<T>::quiet_NaN();
  }
};

// X@GRAD = Out@GRAD / numel(X) everywhere (nothing, and no division, for an
// empty X).
template <typename T>
struct MeanGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output("X@GRAD");
    if (!dx) return;
    const Tensor& x = ctx.Input("X");
    const Tensor& dout = ctx.Input("Out@GRAD");
    NABLA_ENFORCE(dout.Numel() == 1, kInvalidArgument, "op 'mean_grad': expected Out@GRAD of shape [1], but received ",
                  ShapeToString(dout.GetShape()));
    int64_t n = x.Numel();
    T g = dout.Data<T>()[0] / static_cast<T>(n > 0 ? n : 1);
    T* d = AllocOutput<T>(ctx, dx, x.GetShape());
    cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) { std::fill(d + b, d + e, g); });
  }
};

NABLA_REGISTER_OPS(mean) {
  registrar.Op("mean", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .Doc("Out = the mean of all elements of X, of shape [1]; NaN where X has no elements.")
      .Input("X", "(Tensor) the input, of any shape")
      .Output("Out", "(Tensor) the mean, shape [1]")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", {1});
        c.SetOutputDType("Out", c.InputDType("X"));
      })
      .GradMaker<DefaultGradOpDescMaker>()
      .GradCheck(CheckCase("matrix", {CheckInput("X", {3, 4})}))
      .GradCheck(CheckCase("rank3", {CheckInput("X", {2, 2, 3})}));
  registrar.DefaultGradOp("mean", __FILE__, __LINE__).InferShape(InferGradShapes);
  RegisterCpuKernels<MeanKernel, float, double>(registrar, "mean", __FILE__, __LINE__);
  RegisterCpuKernels<MeanGradKernel, float, double>(registrar, "mean_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
