// OpenCL kernels of the activations and their grad ops: one row of
// kUnaryOps per op, whose OpenCL C expressions become that op's kernels
// (activation.cl holds the skeletons and gelu's math). Adding an activation
// here is adding its row.
#include "activation_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// Expressions in OpenCL C over T: `out` of x (X's element) and p (the op's
// attribute, from `param`; 0 without one), and the gradient `dx` of v, d
// (Out@GRAD's element) and p, where v is the element of `grad_reads`, the
// input the grad op has: relu, tanh and sigmoid's grads read Out, gelu and
// leaky_relu's read X (as nn_ops defines them).
struct UnaryOp {
  const char* type;
  const char* out;
  const char* grad_reads;
  const char* dx;
  double (*param)(const ExecutionContext&) = nullptr;
};

double Approximate(const ExecutionContext& ctx) { return ctx.Attr<bool>("approximate") ? 1 : 0; }
double Alpha(const ExecutionContext& ctx) { return ctx.Attr<float>("alpha"); }

const UnaryOp kUnaryOps[] = {
    {"relu", "x > (T)0 ? x : (T)0", "Out", "v > (T)0 ? d : (T)0"},
    {"tanh", "tanh(x)", "Out", "d * ((T)1 - v * v)"},
    {"sigmoid", "sigmoid_of(x)", "Out", "d * v * ((T)1 - v)"},
    {"gelu", "p != (T)0 ? gelu_tanh(x) : gelu_erf(x)", "X", "d * (p != (T)0 ? gelu_tanh_grad(v) : gelu_erf_grad(v))",
     Approximate},
    {"leaky_relu", "x > (T)0 ? x : p * x", "X", "v > (T)0 ? d : p * d", Alpha},
};

// activation.cl followed by every row's functions and kernels.
const std::string& Source() {
  static const std::string source = [] {
    std::string s = cl_source::activation();
    for (const UnaryOp& op : kUnaryOps) {
      const std::string name = op.type;
      s += "\nT " + name + "_out(T x, T p) { return " + op.out + "; }\nUNARY(" + name + ")\n";
      s += "T " + name + "_dx(T v, T d, T p) { return " + op.dx + "; }\nUNARY_GRAD(" + name + ")\n";
    }
    return s;
  }();
  return source;
}

template <typename T>
T Param(const UnaryOp& op, const ExecutionContext& ctx) {
  return op.param ? static_cast<T>(op.param(ctx)) : T(0);
}

template <typename T>
struct UnaryKernel {
  const UnaryOp* op;
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    KernelArg in = s.Arg(x);
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
    Run<T>(dev, Source(), (std::string(op->type) + "_fwd").c_str(),
           {in, KernelArg::Buffer(out), KernelArg(x.Numel()), KernelArg(Param<T>(*op, ctx))}, x.Numel());
  }
};

template <typename T>
struct UnaryGradKernel {
  const UnaryOp* op;
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    if (!dx) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& v = ctx.Input(op->grad_reads);
    const Tensor& dout = ctx.Input(GradVarName("Out"));
    NABLA_ENFORCE(dout.Numel() == v.Numel(), kInvalidArgument, "op '", ctx.Op().Type(),
                  "': expected Out@GRAD of shape ", ShapeToString(v.GetShape()), " but received ",
                  ShapeToString(dout.GetShape()));
    KernelArg va = s.Arg(v), d = s.Arg(dout);
    void* g = AllocateOutput<T>(ctx, dx, v.GetShape());
    Run<T>(dev, Source(), (std::string(op->type) + "_bwd").c_str(),
           {va, d, KernelArg::Buffer(g), KernelArg(v.Numel()), KernelArg(Param<T>(*op, ctx))}, v.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(activation_opencl) {
  for (const UnaryOp& op : kUnaryOps) {
    RegisterOpenClKernels<UnaryKernel>(registrar, op.type, __FILE__, __LINE__, &op);
    RegisterOpenClKernels<UnaryGradKernel>(registrar, std::string(op.type) + "_grad", __FILE__, __LINE__, &op);
  }
}

}  // namespace nabla::nn
