// OpenCL kernels of batch_norm and batch_norm_grad: one work item per
// channel for the statistics, one per element to apply them.
#include "batch_norm_cl.h"
#include "conv_util.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// data_layout NHWC: channels last, read as [all other dims, c, 1].
bool ChannelsLast(const ExecutionContext& ctx) {
  return IsNHWC(ctx.Attr<std::string>("data_layout"), "data_layout", "op '" + ctx.Op().Type() + "'");
}

struct BnView {
  int64_t n, c, inner;
};

// NHWC (channels last) is [all other dims, c, 1], as on the CPU.
BnView ViewOf(const Shape& x, bool nhwc) {
  if (nhwc) {
    BnView v{1, x.back(), 1};
    for (size_t i = 0; i + 1 < x.size(); ++i) v.n *= x[i];
    return v;
  }
  BnView v{x[0], x[1], 1};
  for (size_t i = 2; i < x.size(); ++i) v.inner *= x[i];
  return v;
}

bool GlobalStats(const ExecutionContext& ctx) {
  return ctx.Attr<bool>("is_test") || ctx.Attr<bool>("use_global_stats");
}

template <typename T>
struct BatchNormKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const BnView v = ViewOf(x.GetShape(), ChannelsLast(ctx));
    KernelArg xa = s.Arg(x), scale = s.Arg(ctx.Input("Scale")), bias = s.Arg(ctx.Input("Bias"));
    KernelArg mean_in = s.Arg(ctx.Input("Mean")), var_in = s.Arg(ctx.Input("Variance"));
    // MeanOut/VarianceOut are usually Mean/Variance themselves: the kernel
    // reads a channel's running values before it writes them.
    void* mean_out = AllocateOutput<T>(ctx, ctx.Output("MeanOut"), {v.c});
    void* var_out = AllocateOutput<T>(ctx, ctx.Output("VarianceOut"), {v.c});
    void* saved_mean = AllocateOutput<T>(ctx, ctx.Output("SavedMean"), {v.c});
    void* saved_inv_std = AllocateOutput<T>(ctx, ctx.Output("SavedVariance"), {v.c});
    void* y = AllocateOutput<T>(ctx, ctx.Output("Y"), x.GetShape());
    Run<T>(dev, cl_source::batch_norm(), "bn_stats",
           {xa, mean_in, var_in, KernelArg::Buffer(mean_out), KernelArg::Buffer(var_out), KernelArg::Buffer(saved_mean),
            KernelArg::Buffer(saved_inv_std), KernelArg(v.n), KernelArg(v.c), KernelArg(v.inner),
            KernelArg(static_cast<T>(ctx.Attr<float>("epsilon"))), KernelArg(static_cast<T>(BatchNormMomentum(ctx))),
            KernelArg(static_cast<int32_t>(GlobalStats(ctx)))},
           v.c);
    Run<T>(dev, cl_source::batch_norm(), "bn_apply",
           {xa, scale, bias, KernelArg::Buffer(saved_mean), KernelArg::Buffer(saved_inv_std), KernelArg::Buffer(y),
            KernelArg(x.Numel()), KernelArg(v.c), KernelArg(v.inner)},
           x.Numel());
  }
};

template <typename T>
struct BatchNormGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const BnView v = ViewOf(x.GetShape(), ChannelsLast(ctx));
    KernelArg xa = s.Arg(x), dy = s.Arg(ctx.Input(GradVarName("Y"))), scale = s.Arg(ctx.Input("Scale"));
    KernelArg mean = s.Arg(ctx.Input("SavedMean")), inv_std = s.Arg(ctx.Input("SavedVariance"));
    Tensor* dscale_t = ctx.Output(GradVarName("Scale"));
    Tensor* dbias_t = ctx.Output(GradVarName("Bias"));
    Tensor* dx_t = ctx.Output(GradVarName("X"));
    // dX needs both sums even when nobody wants dScale or dBias.
    Scratch<T> tmp_scale(dev), tmp_bias(dev);
    void* dscale = dscale_t ? AllocateOutput<T>(ctx, dscale_t, {v.c}) : tmp_scale.Allocate(v.c);
    void* dbias = dbias_t ? AllocateOutput<T>(ctx, dbias_t, {v.c}) : tmp_bias.Allocate(v.c);
    Run<T>(dev, cl_source::batch_norm(), "bn_grad_stats",
           {xa, dy, mean, inv_std, KernelArg::Buffer(dscale), KernelArg::Buffer(dbias), KernelArg(v.n), KernelArg(v.c),
            KernelArg(v.inner)},
           v.c);
    if (!dx_t) return;
    void* dx = AllocateOutput<T>(ctx, dx_t, x.GetShape());
    Run<T>(dev, cl_source::batch_norm(), "bn_grad_apply",
           {xa, dy, scale, mean, inv_std, KernelArg::Buffer(dscale), KernelArg::Buffer(dbias), KernelArg::Buffer(dx),
            KernelArg(x.Numel()), KernelArg(v.c), KernelArg(v.inner), KernelArg(v.n * v.inner),
            KernelArg(static_cast<int32_t>(GlobalStats(ctx)))},
           x.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(batch_norm_opencl) {
  RegisterOpenClKernels<BatchNormKernel>(registrar, "batch_norm", __FILE__, __LINE__);
  RegisterOpenClKernels<BatchNormGradKernel>(registrar, "batch_norm_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
