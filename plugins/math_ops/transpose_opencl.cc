// OpenCL kernel of transpose (float32 and float64; its gradient is a
// transpose too): one work item per element of Out, which reads X through
// the permuted strides. Attention written with matmul permutes q, k, v and
// its output every step; without this kernel each went to the host and back.
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "transpose_cl.h"

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
    // InferShape checked the permutation; the kernel holds at most 8 dims.
    NABLA_ENFORCE(axis.size() == rank && rank <= 8, kUnimplemented, "op 'transpose': the OpenCL kernel takes X of ",
                  "rank <= 8 with a permutation of its dims, but received shape ", ShapeToString(xs), " and axis of ",
                  axis.size(), " entries (run it with --device cpu)");
    std::vector<int64_t> x_strides(rank, 1);
    for (size_t k = rank; k-- > 1;) x_strides[k - 1] = x_strides[k] * xs[k];
    Shape os(rank);
    std::vector<int64_t> steps(rank);
    for (size_t k = 0; k < rank; ++k) {
      os[k] = xs[axis[k]];
      steps[k] = x_strides[axis[k]];
    }
    KernelArg xa = s.Arg(x);
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), os);
    Run<T>(dev, cl_source::transpose(), "transpose",
           {xa, KernelArg::Buffer(out), KernelArg(x.Numel()), KernelArg(static_cast<int32_t>(rank)), Long8(os),
            Long8(steps)},
           x.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(transpose_opencl) {
  RegisterOpenClKernels<TransposeClKernel>(registrar, "transpose", __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
