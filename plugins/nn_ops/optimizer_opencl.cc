// OpenCL kernels of sgd, momentum, adam and adamw: elementwise updates that read
// the learning rate (and adam's beta powers) on the device, so a training
// step never waits for the host. Outputs may be their inputs.
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "nn_core_util.h"
#include "optimizer_cl.h"

namespace nabla::nn {
namespace {

using namespace opencl;

void CheckSameSize(const ExecutionContext& ctx, const Tensor& param, const std::vector<const char*>& slots) {
  for (const char* slot : slots) {
    const Tensor& t = ctx.Input(slot);
    NABLA_ENFORCE(t.Numel() == param.Numel(), kInvalidArgument, "op '", ctx.Op().Type(), "': ", slot,
                  " must have Param's shape ", ShapeToString(param.GetShape()), ", but received ",
                  ShapeToString(t.GetShape()));
  }
}

template <typename T>
struct SgdKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& param = ctx.Input("Param");
    CheckSameSize(ctx, param, {"Grad"});
    const Shape shape = param.GetShape();
    const int64_t n = param.Numel();
    KernelArg p = s.Arg(param), g = s.Arg(ctx.Input("Grad"));
    KernelArg lr = s.Scalar<T>(ctx.Input("LearningRate"), "sgd", "LearningRate");
    void* po = AllocateOutput<T>(ctx, ctx.Output("ParamOut"), shape);
    Run<T>(dev, cl_source::optimizer(), "sgd", {p, g, lr, KernelArg::Buffer(po), KernelArg(n)}, n);
  }
};

template <typename T>
struct MomentumKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& param = ctx.Input("Param");
    CheckSameSize(ctx, param, {"Grad", "Velocity"});
    const Shape shape = param.GetShape();
    const Shape vshape = ctx.Input("Velocity").GetShape();
    const int64_t n = param.Numel();
    const T decay = ctx.Attr<std::string>("regularization_method") == "l2_decay"
                        ? static_cast<T>(ctx.Attr<float>("regularization_coeff"))
                        : T(0);
    KernelArg p = s.Arg(param), g = s.Arg(ctx.Input("Grad")), v = s.Arg(ctx.Input("Velocity"));
    KernelArg lr = s.Scalar<T>(ctx.Input("LearningRate"), "momentum", "LearningRate");
    void* po = AllocateOutput<T>(ctx, ctx.Output("ParamOut"), shape);
    void* vo = AllocateOutput<T>(ctx, ctx.Output("VelocityOut"), vshape);
    Run<T>(dev, cl_source::optimizer(), "momentum",
           {p, g, v, lr, KernelArg::Buffer(po), KernelArg::Buffer(vo), KernelArg(n),
            KernelArg(static_cast<T>(ctx.Attr<float>("mu"))),
            KernelArg(static_cast<int32_t>(ctx.Attr<bool>("use_nesterov"))), KernelArg(decay),
            KernelArg(static_cast<T>(ctx.Attr<float>("rescale_grad")))},
           n);
  }
};

template <typename T>
struct AdamKernel {
  // adamw's decoupled weight decay (attributes coeff, lr_ratio, with_decay).
  bool decoupled = false;
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& param = ctx.Input("Param");
    CheckSameSize(ctx, param, {"Grad", "Moment1", "Moment2"});
    const Shape shape = param.GetShape();
    const Shape m1shape = ctx.Input("Moment1").GetShape(), m2shape = ctx.Input("Moment2").GetShape();
    const int64_t n = param.Numel();
    const T beta1 = static_cast<T>(AdamBeta(ctx, "Beta1Tensor", "beta1"));
    const T beta2 = static_cast<T>(AdamBeta(ctx, "Beta2Tensor", "beta2"));
    for (const char* slot : {"Beta1Pow", "Beta2Pow"})
      NABLA_ENFORCE(!ctx.Output(std::string(slot) + "Out") || ctx.Attr<bool>("use_global_beta_pow") ||
                        ctx.Input(slot).GetDType() == DTypeOf<T>::value,
                    kUnimplemented, "op '", ctx.Op().Type(), "' on OpenCL: ", slot, " must have Param's dtype ",
                    DTypeName(DTypeOf<T>::value), " when ", slot, "Out is written, but received ",
                    DTypeName(ctx.Input(slot).GetDType()));
    KernelArg p = s.Arg(param), g = s.Arg(ctx.Input("Grad"));
    KernelArg m1 = s.Arg(ctx.Input("Moment1")), m2 = s.Arg(ctx.Input("Moment2"));
    const std::string& type = ctx.Op().Type();
    KernelArg lr = s.Scalar<T>(ctx.Input("LearningRate"), type, "LearningRate");
    KernelArg b1p = s.Scalar<T>(ctx.Input("Beta1Pow"), type, "Beta1Pow");
    KernelArg b2p = s.Scalar<T>(ctx.Input("Beta2Pow"), type, "Beta2Pow");
    const T lr_ratio = decoupled ? static_cast<T>(ctx.Attr<float>("lr_ratio")) : T(1);
    const T decay = decoupled && ctx.Attr<bool>("with_decay") ? static_cast<T>(ctx.Attr<float>("coeff")) : T(0);
    void* po = AllocateOutput<T>(ctx, ctx.Output("ParamOut"), shape);
    void* m1o = AllocateOutput<T>(ctx, ctx.Output("Moment1Out"), m1shape);
    void* m2o = AllocateOutput<T>(ctx, ctx.Output("Moment2Out"), m2shape);
    Run<T>(dev, cl_source::optimizer(), "adam",
           {p, g, m1, m2, lr, b1p, b2p, KernelArg::Buffer(po), KernelArg::Buffer(m1o), KernelArg::Buffer(m2o),
            KernelArg(n), KernelArg(beta1), KernelArg(beta2), KernelArg(static_cast<T>(AdamEpsilon(ctx))),
            KernelArg(lr_ratio), KernelArg(decay)},
           n);
    // After the update (the queue is in order), so an in-place BetaPowOut
    // cannot change what the update read.
    auto advance = [&](const char* in_slot, const char* out_slot, KernelArg in, T beta) {
      Tensor* out = ctx.Output(out_slot);
      if (!out) return;
      void* o = AllocateOutput<T>(ctx, out, ctx.Input(in_slot).GetShape());
      Run<T>(dev, cl_source::optimizer(), "scale_scalar", {KernelArg::Buffer(o), in, KernelArg(beta)}, 1);
    };
    if (ctx.Attr<bool>("use_global_beta_pow")) return;  // another op advances them
    advance("Beta1Pow", "Beta1PowOut", b1p, beta1);
    advance("Beta2Pow", "Beta2PowOut", b2p, beta2);
  }
};

}  // namespace

NABLA_REGISTER_OPS(optimizer_opencl) {
  RegisterOpenClKernels<SgdKernel>(registrar, "sgd", __FILE__, __LINE__);
  RegisterOpenClKernels<MomentumKernel>(registrar, "momentum", __FILE__, __LINE__);
  RegisterOpenClKernels<AdamKernel>(registrar, "adam", __FILE__, __LINE__);
  RegisterOpenClKernels<AdamKernel>(registrar, "adamw", __FILE__, __LINE__, true);
}

}  // namespace nabla::nn
