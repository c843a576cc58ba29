// OpenCL kernel of transpose (float32 and float64; its gradient is a
// transpose too): one work item per element of Out, which reads X through
// the permuted strides. Attention written with matmul permutes q, k, v and
// its output every step; without this kernel each went to the host and back.
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "transpose_cl.h"
#include "transpose_util.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

template <typename T>
struct TransposeClKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const auto& axis = ctx.Attr<std::vector<int>>("axis");
    const Shape& xs = x.GetShape();
    const size_t rank = xs.size();
    CheckPermutation(axis, rank, "op 'transpose'");
    NABLA_ENFORCE(rank <= 8, kUnimplemented, "op 'transpose': the OpenCL kernel takes X of rank <= 8, but received ",
                  "shape ", ShapeToString(xs), " (run it with --device cpu)");
    const Permuted p = PermuteDims(xs, axis);
    KernelArg xa = s.Arg(x);
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), p.out);
    Run<T>(dev, cl_source::transpose(), "transpose",
           {xa, KernelArg::Buffer(out), KernelArg(x.Numel()), KernelArg(static_cast<int32_t>(rank)), Long8(p.out),
            Long8(p.steps)},
           x.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(transpose_opencl) {
  RegisterOpenClKernels<TransposeClKernel>(registrar, "transpose", __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
