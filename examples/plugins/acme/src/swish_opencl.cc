// acme_swish's OpenCL kernels, beside the op (swish_op.cc) in the same
// plugin: the OpenCL C is swish.cl, embedded by nabla_add_opencl_kernels()
// as swish_cl.h. Launched through nabla/opencl/sdk_kernel.h, so the plugin
// still links neither nabla nor OpenCL: the kernels run only once the core
// has loaded the OpenCL device plugin for an `opencl` device.
#include <string>

#include "nabla/opencl/sdk_kernel.h"
#include "nabla/plugin.h"
#include "swish_cl.h"

namespace acme {
namespace {

using nabla::ExecutionContext;
using nabla::GradVarName;
using nabla::Tensor;
using nabla::opencl::Arg;

template <typename T>
struct SwishCl {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    Tensor& out = *ctx.Output("Out");
    out.Allocate<T>(ctx.GetDevice(), x.GetShape());
    const T beta = static_cast<T>(ctx.Attr<float>("beta"));
    nabla::opencl::Run<T>(ctx, nabla::cl_source::swish(), "acme_swish", {Arg(x), Arg(out), Arg(beta), Arg(x.Numel())},
                          x.Numel());
  }
};

template <typename T>
struct SwishGradCl {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    if (!dx) return;  // @EMPTY@: nobody needs it
    const Tensor& x = ctx.Input("X");
    dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
    const T beta = static_cast<T>(ctx.Attr<float>("beta"));
    nabla::opencl::Run<T>(ctx, nabla::cl_source::swish(), "acme_swish_grad",
                          {Arg(x), Arg(ctx.Input(GradVarName("Out"))), Arg(*dx), Arg(beta), Arg(x.Numel())}, x.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(acme_swish_opencl) {
  nabla::opencl::RegisterOpenClKernels<SwishCl>(registrar, "acme_swish", __FILE__, __LINE__);
  nabla::opencl::RegisterOpenClKernels<SwishGradCl>(registrar, "acme_swish_grad", __FILE__, __LINE__);
}

}  // namespace acme
