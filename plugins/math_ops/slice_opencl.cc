// OpenCL kernels of slice and slice_grad (slice.cl), float32 and float64: a
// work item per element of the slice. A fused q, k, v projection sliced
// into its three parts, or the last position's logits, stay on the device.
#include <vector>

#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "slice_box.h"
#include "slice_cl.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

// The box as kernel arguments; the kernels take rank <= 8.
std::vector<KernelArg> BoxArgs(const ExecutionContext& ctx, const Shape& in, const SliceBox& b) {
  NABLA_ENFORCE(in.size() <= 8, kUnimplemented, "op '", ctx.Op().Type(),
                "': the OpenCL kernel takes Input of rank <= 8, but received shape ", ShapeToString(in),
                " (run it with --device cpu)");
  return {KernelArg(static_cast<int32_t>(in.size())), Long8(b.box), Long8(b.begin),
          Long8(std::vector<int64_t>(in.begin(), in.end()))};
}

template <typename T>
struct SliceClKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& in = ctx.Input("Input");
    const SliceBox b = MakeSliceBox(in.GetShape(), ctx.Op(), ReadBounds(ctx), "op 'slice'");
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), b.out);
    const int64_t n = NumElements(b.box);
    std::vector<KernelArg> args = {s.Arg(in), KernelArg::Buffer(out), KernelArg(n)};
    for (const KernelArg& a : BoxArgs(ctx, in.GetShape(), b)) args.push_back(a);
    Run<T>(dev, cl_source::slice(), "slice_fwd", args, n);
  }
};

template <typename T>
struct SliceGradClKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* din = ctx.Output("Input@GRAD");
    if (!din) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Shape& in = ctx.Input("Input").GetShape();
    const Tensor& dout = ctx.Input("Out@GRAD");
    const SliceBox b = MakeSliceBox(in, ctx.Op(), ReadBounds(ctx), "op 'slice_grad'");
    const int64_t n = NumElements(b.box);
    NABLA_ENFORCE(dout.Numel() == n, kInvalidArgument, "op 'slice_grad': expected Out@GRAD of shape ",
                  ShapeToString(b.out), ", but received ", ShapeToString(dout.GetShape()));
    KernelArg da = s.Arg(dout);
    void* dx = AllocateOutput<T>(ctx, din, in);
    if (NumElements(in) > 0) Zero<T>(dev, dx, NumElements(in));
    std::vector<KernelArg> args = {da, KernelArg::Buffer(dx), KernelArg(n)};
    for (const KernelArg& a : BoxArgs(ctx, in, b)) args.push_back(a);
    Run<T>(dev, cl_source::slice(), "slice_bwd", args, n);
  }
};

}  // namespace

NABLA_REGISTER_OPS(slice_opencl) {
  RegisterOpenClKernels<SliceClKernel>(registrar, "slice", __FILE__, __LINE__);
  RegisterOpenClKernels<SliceGradClKernel>(registrar, "slice_grad", __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
