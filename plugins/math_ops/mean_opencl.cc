// OpenCL kernels of mean (one work group reduces everything) and mean_grad.
#include <limits>

#include "mean_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

constexpr size_t kReduceGroup = 64;

template <typename T>
struct MeanKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const int64_t n = x.Numel();
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), {1});
    if (n == 0) {  // the mean of nothing is NaN, as on the CPU
      const T nan = std::numeric_limits<T>::quiet_NaN();
      dev.Fill(out, 0, sizeof nan, &nan, sizeof nan);
      return;
    }
    Run<T>(dev, cl_source::mean(), "sum_all",
           {s.Arg(x), KernelArg::Buffer(out), KernelArg(n), KernelArg(static_cast<T>(n)),
            KernelArg::Local(kReduceGroup * sizeof(T))},
           kReduceGroup, kReduceGroup);
  }
};

// X@GRAD = Out@GRAD / numel(X) everywhere, read on the device.
template <typename T>
struct MeanGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    if (!dx) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& dout = ctx.Input(GradVarName("Out"));
    NABLA_ENFORCE(dout.Numel() == 1, kInvalidArgument, "op 'mean_grad': expected Out@GRAD of shape [1], but received ",
                  ShapeToString(dout.GetShape()));
    const int64_t n = x.Numel();
    KernelArg da = s.Arg(dout);
    void* g = AllocateOutput<T>(ctx, dx, x.GetShape());
    if (n == 0) return;
    Run<T>(dev, cl_source::mean(), "fill_scaled",
           {KernelArg::Buffer(g), da, KernelArg(n), KernelArg(T(1) / static_cast<T>(n))}, n);
  }
};

}  // namespace

NABLA_REGISTER_OPS(mean_opencl) {
  RegisterOpenClKernels<MeanKernel>(registrar, "mean", __FILE__, __LINE__);
  RegisterOpenClKernels<MeanGradKernel>(registrar, "mean_grad", __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
