// OpenCL kernels of squared_l2_norm and its gradient (squared_l2_norm.cl):
// global-norm gradient clipping (`clip_global_norm` in run configs) takes
// one per parameter every step, which on the CPU meant copying every
// gradient to the host. The norm sums in two stages, in a fixed order: a
// work item per chunk, then one over the chunks' sums.
#include <algorithm>

#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "squared_l2_norm_cl.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// Work items of the first stage at most: enough to fill a GPU, few enough
// for the second stage's single work item.
constexpr int64_t kMaxParts = 1024;

template <typename T>
struct SquaredL2NormClKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const int64_t n = x.Numel();
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), {1});
    if (n == 0) return Zero<T>(dev, out, 1);
    const int64_t parts = std::min(n, kMaxParts);
    const int64_t chunk = (n + parts - 1) / parts;
    Scratch<T> part_buf(dev);
    void* part = part_buf.Allocate(parts);
    Run<T>(dev, cl_source::squared_l2_norm(), "sq_parts",
           {s.Arg(x), KernelArg::Buffer(part), KernelArg(n), KernelArg(chunk), KernelArg(parts)}, parts);
    Run<T>(dev, cl_source::squared_l2_norm(), "sq_total",
           {KernelArg::Buffer(part), KernelArg::Buffer(out), KernelArg(parts)}, 1);
  }
};

template <typename T>
struct SquaredL2NormGradClKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    if (!dx) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    KernelArg xa = s.Arg(x), da = s.Arg(ctx.Input(GradVarName("Out")));
    void* g = AllocateOutput<T>(ctx, dx, x.GetShape());
    Run<T>(dev, cl_source::squared_l2_norm(), "sq_grad", {xa, da, KernelArg::Buffer(g), KernelArg(x.Numel())},
           x.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(squared_l2_norm_opencl) {
  RegisterOpenClKernels<SquaredL2NormClKernel>(registrar, "squared_l2_norm", __FILE__, __LINE__);
  RegisterOpenClKernels<SquaredL2NormGradClKernel>(registrar, "squared_l2_norm_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
