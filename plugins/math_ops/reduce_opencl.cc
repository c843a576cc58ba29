// OpenCL kernels of reduce_sum, reduce_mean, reduce_max and reduce_min and
// their grad ops (reduce.cl), float32 and float64: a loss or a norm written
// with reductions (an RMSNorm as reduce_mean, rsqrt and elementwise_mul)
// stays on the device.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "reduce_cl.h"
#include "reduce_util.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

enum Fold : int32_t { kSum = 0, kMax = 1, kMin = 2 };

// Work items a reduction's first stage aims at: enough to fill a GPU where
// Out has few elements (a loss's mean has one), each folding a chunk.
constexpr int64_t kWorkItems = 4096;

// X's dims and which of them Out keeps, as the kernels take them.
struct ReduceArgs {
  std::vector<int64_t> dims, keep;
  int64_t count = 1;
};

ReduceArgs ArgsOf(const ExecutionContext& ctx, const Shape& x) {
  NABLA_ENFORCE(x.size() <= 8, kUnimplemented, "op '", ctx.Op().Type(),
                "': the OpenCL kernel takes X of rank <= 8, but received shape ", ShapeToString(x),
                " (run it with --device cpu)");
  const ReducePlan p = MakeReducePlan(ctx, x);
  ReduceArgs a{std::vector<int64_t>(x.begin(), x.end()), {}, p.count};
  // A dim of size 1 reads the same either way; a reduced one has keep 1 in
  // the plan only where X's dim is 1 too.
  for (size_t k = 0; k < x.size(); ++k) a.keep.push_back(p.keep[k] == x[k] ? 1 : 0);
  return a;
}

template <typename T>
void Forward(const ExecutionContext& ctx, Fold fold, bool mean) {
  OpenClDevice& dev = DeviceOf(ctx);
  Staging s(dev);
  const Tensor& x = ctx.Input("X");
  const ReduceArgs a = ArgsOf(ctx, x.GetShape());
  Tensor* out = ctx.Output("Out");
  const std::vector<bool> mask = ReducedDims(x.GetShape(), ctx.Attr<std::vector<int>>("dim"),
                                             ctx.Attr<bool>("reduce_all"), StrCat("op '", ctx.Op().Type(), "'"));
  void* o = AllocateOutput<T>(ctx, out, ReducedShape(x.GetShape(), mask, ctx.Attr<bool>("keep_dim")));
  // The mean of no elements is NaN, as on the CPU: the empty sum 0 times NaN.
  const T scale = !mean ? T(1) : a.count > 0 ? T(1) / static_cast<T>(a.count) : std::numeric_limits<T>::quiet_NaN();
  // Parts per output: about kWorkItems work items in all, each folding a
  // chunk of its output's elements.
  const int64_t m = out->Numel();
  if (m == 0) return;
  int64_t parts = std::clamp<int64_t>(kWorkItems / std::max<int64_t>(m, 1), 1, std::max<int64_t>(a.count, 1));
  const int64_t chunk = (std::max<int64_t>(a.count, 1) + parts - 1) / parts;
  parts = (std::max<int64_t>(a.count, 1) + chunk - 1) / chunk;
  Scratch<T> part_buf(dev);
  void* part = part_buf.Allocate(m * parts);
  Run<T>(dev, cl_source::reduce(), "reduce_part",
         {s.Arg(x), KernelArg::Buffer(part), KernelArg(m), KernelArg(parts), KernelArg(chunk),
          KernelArg(static_cast<int32_t>(a.dims.size())), Long8(a.dims), Long8(a.keep),
          KernelArg(static_cast<int32_t>(fold))},
         m * parts);
  Run<T>(dev, cl_source::reduce(), "reduce_join",
         {KernelArg::Buffer(part), KernelArg::Buffer(o), KernelArg(m), KernelArg(parts),
          KernelArg(static_cast<int32_t>(fold)), KernelArg(scale)},
         m);
}

template <typename T>
void Backward(const ExecutionContext& ctx, bool extremum, bool mean) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  OpenClDevice& dev = DeviceOf(ctx);
  Staging s(dev);
  const Tensor& x = ctx.Input("X");
  const ReduceArgs a = ArgsOf(ctx, x.GetShape());
  const T scale = mean && a.count > 0 ? T(1) / static_cast<T>(a.count) : T(1);
  KernelArg xa = s.Arg(x), da = s.Arg(ctx.Input(GradVarName("Out")));
  KernelArg oa = extremum ? s.Arg(ctx.Input("Out")) : xa;  // read by the extremum's gradient alone
  void* g = AllocateOutput<T>(ctx, dx, x.GetShape());
  Run<T>(dev, cl_source::reduce(), "reduce_grad",
         {xa, oa, da, KernelArg::Buffer(g), KernelArg(x.Numel()), KernelArg(static_cast<int32_t>(a.dims.size())),
          Long8(a.dims), Long8(a.keep), KernelArg(static_cast<int32_t>(extremum ? 1 : 0)), KernelArg(scale)},
         x.Numel());
}

template <typename T>
struct ReduceSumClKernel {
  void operator()(const ExecutionContext& ctx) const { Forward<T>(ctx, kSum, false); }
};
template <typename T>
struct ReduceMeanClKernel {
  void operator()(const ExecutionContext& ctx) const { Forward<T>(ctx, kSum, true); }
};
template <typename T>
struct ReduceMaxClKernel {
  void operator()(const ExecutionContext& ctx) const { Forward<T>(ctx, kMax, false); }
};
template <typename T>
struct ReduceMinClKernel {
  void operator()(const ExecutionContext& ctx) const { Forward<T>(ctx, kMin, false); }
};
template <typename T>
struct ReduceSumGradClKernel {
  void operator()(const ExecutionContext& ctx) const { Backward<T>(ctx, false, false); }
};
template <typename T>
struct ReduceMeanGradClKernel {
  void operator()(const ExecutionContext& ctx) const { Backward<T>(ctx, false, true); }
};
template <typename T>
struct ReduceExtremumGradClKernel {
  void operator()(const ExecutionContext& ctx) const { Backward<T>(ctx, true, false); }
};

}  // namespace

NABLA_REGISTER_OPS(reduce_opencl) {
  RegisterOpenClKernels<ReduceSumClKernel>(registrar, "reduce_sum", __FILE__, __LINE__);
  RegisterOpenClKernels<ReduceSumGradClKernel>(registrar, "reduce_sum_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<ReduceMeanClKernel>(registrar, "reduce_mean", __FILE__, __LINE__);
  RegisterOpenClKernels<ReduceMeanGradClKernel>(registrar, "reduce_mean_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<ReduceMaxClKernel>(registrar, "reduce_max", __FILE__, __LINE__);
  RegisterOpenClKernels<ReduceExtremumGradClKernel>(registrar, "reduce_max_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<ReduceMinClKernel>(registrar, "reduce_min", __FILE__, __LINE__);
  RegisterOpenClKernels<ReduceExtremumGradClKernel>(registrar, "reduce_min_grad", __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
