// OpenCL kernels of dropout and dropout_grad (dropout.cl): the mask is drawn
// on the host by the CPU kernel's generator (dropout.h), so both devices
// drop the same elements for a seed, and uploaded as the Mask output; the
// products run on the device, where a transformer's activations live.
#include <vector>

#include "dropout.h"
#include "dropout_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::nn {
namespace {

using namespace opencl;

template <typename T>
struct DropoutClKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const double p = ctx.Attr<float>("dropout_prob");
    const bool upscale = DropoutUpscales(ctx);
    const int64_t n = x.Numel();
    KernelArg xa = s.Arg(x);
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
    if (ctx.Attr<bool>("is_test")) {
      const T scale = upscale ? T(1) : static_cast<T>(1.0 - p);
      Run<T>(dev, cl_source::dropout(), "dropout_scale", {xa, KernelArg::Buffer(out), KernelArg(n), KernelArg(scale)},
             n);
      return;
    }
    Tensor* mask = ctx.Output("Mask");
    NABLA_ENFORCE(mask != nullptr, kInvalidArgument,
                  "dropout in training (is_test false) needs a Mask output for its gradient, but none was given");
    std::vector<T> drawn(static_cast<size_t>(n));
    DrawDropoutMask(ctx, n, p, drawn.data());
    void* m = AllocateOutput<T>(ctx, mask, x.GetShape());
    if (n > 0) dev.CopyFromHost(m, drawn.data(), drawn.size() * sizeof(T));
    // p == 1 drops everything; dividing by 1 - p would give 0 * inf = NaN.
    const T keep_scale = (upscale && p < 1.0) ? static_cast<T>(1.0 / (1.0 - p)) : T(1);
    Run<T>(dev, cl_source::dropout(), "dropout_apply",
           {xa, KernelArg::Buffer(m), KernelArg::Buffer(out), KernelArg(n), KernelArg(keep_scale)}, n);
  }
};

template <typename T>
struct DropoutGradClKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    if (!dx) return;
    NABLA_ENFORCE(!ctx.Attr<bool>("is_test"), kPreconditionNotMet,
                  "dropout_grad needs a training-mode dropout (is_test false), but is_test is true");
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& mask = ctx.Input("Mask");
    const double p = ctx.Attr<float>("dropout_prob");
    const T scale = (DropoutUpscales(ctx) && p < 1.0) ? static_cast<T>(1.0 / (1.0 - p)) : T(1);
    KernelArg da = s.Arg(ctx.Input(GradVarName("Out"))), ma = s.Arg(mask);
    void* g = AllocateOutput<T>(ctx, dx, mask.GetShape());
    Run<T>(dev, cl_source::dropout(), "dropout_bwd",
           {da, ma, KernelArg::Buffer(g), KernelArg(mask.Numel()), KernelArg(scale)}, mask.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(dropout_opencl) {
  RegisterOpenClKernels<DropoutClKernel>(registrar, "dropout", __FILE__, __LINE__);
  RegisterOpenClKernels<DropoutGradClKernel>(registrar, "dropout_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
