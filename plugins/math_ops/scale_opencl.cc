// OpenCL kernel of scale: Out = scale * X + bias (or scale * (X + bias)).
#include "nabla/opencl/kernel.h"
#include "nabla/opkit/attr_tensor.h"
#include "nabla/plugin.h"
#include "scale_cl.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

template <typename T>
struct ScaleKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    KernelArg xa = s.Arg(x);
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
    Run<T>(dev, cl_source::scale(), "scale",
           {xa, KernelArg::Buffer(out), KernelArg(x.Numel()),
            KernelArg(static_cast<T>(*opkit::FloatAttrOrTensor(ctx, "ScaleTensor", "scale"))),
            KernelArg(static_cast<T>(ctx.Attr<float>("bias"))),
            KernelArg(static_cast<int32_t>(ctx.Attr<bool>("bias_after_scale")))},
           x.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(scale_opencl) { RegisterOpenClKernels<ScaleKernel>(registrar, "scale", __FILE__, __LINE__); }

}  // namespace nabla::math_ops
