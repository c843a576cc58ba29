// OpenCL kernels of tril_triu and its gradient (tril_triu.cl), float32 and
// float64: a program's own attention mask is built on the device.
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "tril_triu_cl.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// The triangle of x written to out (its gradient keeps the same one).
template <typename T>
void Triangle(const ExecutionContext& ctx, const Tensor& x, Tensor* out) {
  OpenClDevice& dev = DeviceOf(ctx);
  Staging s(dev);
  const Shape& shape = x.GetShape();
  NABLA_ENFORCE(shape.size() >= 2, kInvalidArgument, "op '", ctx.Op().Type(),
                "': expected a tensor of rank >= 2 (matrices in its last two dims), but received shape ",
                ShapeToString(shape));
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  KernelArg xa = s.Arg(x);
  void* o = AllocateOutput<T>(ctx, out, shape);
  Run<T>(dev, cl_source::tril_triu(), "tril_triu",
         {xa, KernelArg::Buffer(o), KernelArg(x.Numel()), KernelArg(rows), KernelArg(cols),
          KernelArg(static_cast<int64_t>(ctx.Attr<int>("diagonal"))),
          KernelArg(static_cast<int32_t>(ctx.Attr<bool>("lower")))},
         x.Numel());
}

template <typename T>
struct TrilTriuClKernel {
  void operator()(const ExecutionContext& ctx) const { Triangle<T>(ctx, ctx.Input("X"), ctx.Output("Out")); }
};
template <typename T>
struct TrilTriuGradClKernel {
  void operator()(const ExecutionContext& ctx) const {
    if (Tensor* dx = ctx.Output(GradVarName("X"))) Triangle<T>(ctx, ctx.Input(GradVarName("Out")), dx);
  }
};

}  // namespace

NABLA_REGISTER_OPS(tril_triu_opencl) {
  RegisterOpenClKernels<TrilTriuClKernel>(registrar, "tril_triu", __FILE__, __LINE__);
  RegisterOpenClKernels<TrilTriuGradClKernel>(registrar, "tril_triu_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
