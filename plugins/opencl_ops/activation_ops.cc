// relu, tanh, sigmoid and their grad ops (which read Out, not X, as nn_ops
// defines them); gelu and leaky_relu, whose grad ops read X.
#include "nabla/plugin.h"
#include "ocl_util.h"

namespace nabla::opencl_ops {
namespace {

template <typename T>
void Forward(const ExecutionContext& ctx, const char* kernel) {
  OpenClDevice& dev = Dev(ctx);
  Staging s(dev);
  const Tensor& x = ctx.Input("X");
  KernelArg in = s.Arg(x);
  void* out = Out<T>(ctx, ctx.Output("Out"), x.GetShape());
  Run<T>(dev, kernel, {in, KernelArg::Buffer(out), KernelArg(x.Numel())}, x.Numel());
}

template <typename T>
void Backward(const ExecutionContext& ctx, const char* kernel) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  OpenClDevice& dev = Dev(ctx);
  Staging s(dev);
  const Tensor& out = ctx.Input("Out");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  NABLA_ENFORCE(dout.Numel() == out.Numel(), kInvalidArgument, "op '", ctx.Op().Type(),
                "': expected Out@GRAD of shape ", ShapeToString(out.GetShape()), " but received ",
                ShapeToString(dout.GetShape()));
  KernelArg o = s.Arg(out), d = s.Arg(dout);
  void* g = Out<T>(ctx, dx, out.GetShape());
  Run<T>(dev, kernel, {o, d, KernelArg::Buffer(g), KernelArg(out.Numel())}, out.Numel());
}

#define NABLA_ACTIVATION(Name, name)                                                       \
  template <typename T>                                                                    \
  struct Name##Fwd {                                                                       \
    void operator()(const ExecutionContext& ctx) const { Forward<T>(ctx, #name "_fwd"); }  \
  };                                                                                       \
  template <typename T>                                                                    \
  struct Name##Bwd {                                                                       \
    void operator()(const ExecutionContext& ctx) const { Backward<T>(ctx, #name "_bwd"); } \
  };

NABLA_ACTIVATION(Relu, relu)
NABLA_ACTIVATION(Tanh, tanh)
NABLA_ACTIVATION(Sigmoid, sigmoid)
#undef NABLA_ACTIVATION

// Out = f(X; attribute) and X@GRAD = f'(X; attribute) * Out@GRAD, the
// attribute passed as the kernels' last argument.
template <typename T, typename A>
void ForwardWith(const ExecutionContext& ctx, const char* kernel, A attr) {
  OpenClDevice& dev = Dev(ctx);
  Staging s(dev);
  const Tensor& x = ctx.Input("X");
  KernelArg in = s.Arg(x);
  void* out = Out<T>(ctx, ctx.Output("Out"), x.GetShape());
  Run<T>(dev, kernel, {in, KernelArg::Buffer(out), KernelArg(x.Numel()), KernelArg(attr)}, x.Numel());
}

template <typename T, typename A>
void BackwardFromX(const ExecutionContext& ctx, const char* kernel, A attr) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  OpenClDevice& dev = Dev(ctx);
  Staging s(dev);
  const Tensor& x = ctx.Input("X");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  NABLA_ENFORCE(dout.Numel() == x.Numel(), kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD of shape ",
                ShapeToString(x.GetShape()), " but received ", ShapeToString(dout.GetShape()));
  KernelArg xa = s.Arg(x), d = s.Arg(dout);
  void* g = Out<T>(ctx, dx, x.GetShape());
  Run<T>(dev, kernel, {xa, d, KernelArg::Buffer(g), KernelArg(x.Numel()), KernelArg(attr)}, x.Numel());
}

int32_t Approximate(const ExecutionContext& ctx) { return ctx.Attr<bool>("approximate") ? 1 : 0; }

template <typename T>
T Alpha(const ExecutionContext& ctx) {
  return static_cast<T>(ctx.Attr<float>("alpha"));
}

template <typename T>
struct GeluFwd {
  void operator()(const ExecutionContext& ctx) const { ForwardWith<T>(ctx, "gelu_fwd", Approximate(ctx)); }
};
template <typename T>
struct GeluBwd {
  void operator()(const ExecutionContext& ctx) const { BackwardFromX<T>(ctx, "gelu_bwd", Approximate(ctx)); }
};
template <typename T>
struct LeakyReluFwd {
  void operator()(const ExecutionContext& ctx) const { ForwardWith<T>(ctx, "leaky_relu_fwd", Alpha<T>(ctx)); }
};
template <typename T>
struct LeakyReluBwd {
  void operator()(const ExecutionContext& ctx) const { BackwardFromX<T>(ctx, "leaky_relu_bwd", Alpha<T>(ctx)); }
};

}  // namespace

NABLA_REGISTER_OPS(opencl_activations) {
  RegisterFloatKernels<ReluFwd>(registrar, "relu", __FILE__, __LINE__);
  RegisterFloatKernels<ReluBwd>(registrar, "relu_grad", __FILE__, __LINE__);
  RegisterFloatKernels<TanhFwd>(registrar, "tanh", __FILE__, __LINE__);
  RegisterFloatKernels<TanhBwd>(registrar, "tanh_grad", __FILE__, __LINE__);
  RegisterFloatKernels<SigmoidFwd>(registrar, "sigmoid", __FILE__, __LINE__);
  RegisterFloatKernels<SigmoidBwd>(registrar, "sigmoid_grad", __FILE__, __LINE__);
  RegisterFloatKernels<GeluFwd>(registrar, "gelu", __FILE__, __LINE__);
  RegisterFloatKernels<GeluBwd>(registrar, "gelu_grad", __FILE__, __LINE__);
  RegisterFloatKernels<LeakyReluFwd>(registrar, "leaky_relu", __FILE__, __LINE__);
  RegisterFloatKernels<LeakyReluBwd>(registrar, "leaky_relu_grad", __FILE__, __LINE__);
}

}  // namespace nabla::opencl_ops
