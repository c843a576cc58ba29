#pragma once
// Tables of elementwise unary ops as OpenCL C expressions, for the plugins
// whose ops are Out = f(X) with a gradient from X, Out or Out@GRAD alone
// (nn_ops' activations, math_ops' unary math): a plugin lists one UnaryOp
// row per op and registers the table with RegisterUnaryOpenClKernels; each
// row becomes the kernels `<op>_fwd` and `<op>_bwd` of one program built from
// the plugin's OpenCL C (its .cl, for the prelude and any math the rows
// call), the skeletons below and the rows' functions. A plugin registers
// kernels for its own ops only, so each plugin keeps its own table; the
// machinery is here, once.
#include <array>
#include <string>
#include <variant>

#include "nabla/error.h"
#include "nabla/opencl/kernel.h"

namespace nabla::opencl {

// Expressions in OpenCL C over T: `out` of x (X's element), and the gradient
// `dx` of v, d (Out@GRAD's element), where v is the element of `grad_reads`,
// the input the op's grad op reads ("X", "Out" or "Out@GRAD"). Both may use
// p, q and r, the op's numeric `attrs` in the order named (0 where unnamed;
// a bool attribute is 1 or 0).
struct UnaryOp {
  const char* type;
  const char* out;
  const char* grad_reads;
  const char* dx;
  std::array<const char*, 3> attrs = {};
};

// The kernel skeletons: for each row, `<op>_out(x, p, q, r)` and
// `<op>_dx(v, d, p, q, r)` are defined and then UNARY(<op>) and
// UNARY_GRAD(<op>) make `<op>_fwd` and `<op>_bwd`.
inline const char* UnarySkeletons() {
  return R"nabla_cl(
#define UNARY(NAME)                                                                         \
  __kernel void NAME##_fwd(__global const T* x, __global T* out, long n, T p, T q, T r) {   \
    long i = GID;                                                                           \
    if (i < n) out[i] = NAME##_out(x[i], p, q, r);                                          \
  }

#define UNARY_GRAD(NAME)                                                                                        \
  __kernel void NAME##_bwd(__global const T* v, __global const T* dout, __global T* dx, long n, T p, T q, T r) { \
    long i = GID;                                                                                               \
    if (i < n) dx[i] = NAME##_dx(v[i], dout[i], p, q, r);                                                       \
  }
)nabla_cl";
}

// `base` (a plugin's embedded .cl, which starts with the prelude) followed
// by the skeletons and every row's functions and kernels.
template <size_t N>
std::string UnaryTableSource(const std::string& base, const UnaryOp (&ops)[N]) {
  std::string s = base + UnarySkeletons();
  for (const UnaryOp& op : ops) {
    const std::string name = op.type;
    s += "\nT " + name + "_out(T x, T p, T q, T r) { return " + op.out + "; }\nUNARY(" + name + ")\n";
    s += "T " + name + "_dx(T v, T d, T p, T q, T r) { return " + op.dx + "; }\nUNARY_GRAD(" + name + ")\n";
  }
  return s;
}

// A numeric attribute of the running op as a double (float, int, or bool
// as 1 or 0).
inline double NumericAttr(const ExecutionContext& ctx, const char* name) {
  const Attribute& a = ctx.Op().GetAttr(name);
  if (const float* f = std::get_if<float>(&a)) return *f;
  if (const int* i = std::get_if<int>(&a)) return *i;
  if (const bool* b = std::get_if<bool>(&a)) return *b ? 1.0 : 0.0;
  NABLA_THROW(kInvalidArgument, "op '", ctx.Op().Type(), "': attribute ", name,
              " must be a float, int or bool, but received ", AttrTypeName(TypeOf(a)));
}

template <typename T>
std::array<KernelArg, 3> UnaryAttrArgs(const UnaryOp& op, const ExecutionContext& ctx) {
  std::array<KernelArg, 3> args = {KernelArg(T(0)), KernelArg(T(0)), KernelArg(T(0))};
  for (size_t i = 0; i < op.attrs.size(); ++i)
    if (op.attrs[i]) args[i] = KernelArg(static_cast<T>(NumericAttr(ctx, op.attrs[i])));
  return args;
}

// One row's kernels. `source` is the table's program text, built once by
// the plugin (UnaryTableSource) and living as long as the plugin.
template <typename T>
struct UnaryKernel {
  const UnaryOp* op;
  const std::string* source;
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    KernelArg in = s.Arg(x);
    void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
    const std::array<KernelArg, 3> a = UnaryAttrArgs<T>(*op, ctx);
    Run<T>(dev, *source, (std::string(op->type) + "_fwd").c_str(),
           {in, KernelArg::Buffer(out), KernelArg(x.Numel()), a[0], a[1], a[2]}, x.Numel());
  }
};

template <typename T>
struct UnaryGradKernel {
  const UnaryOp* op;
  const std::string* source;
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
    const std::array<KernelArg, 3> a = UnaryAttrArgs<T>(*op, ctx);
    Run<T>(dev, *source, (std::string(op->type) + "_bwd").c_str(),
           {va, d, KernelArg::Buffer(g), KernelArg(v.Numel()), a[0], a[1], a[2]}, v.Numel());
  }
};

// Registers every row's op and grad op kernels, float32 and float64.
template <size_t N>
void RegisterUnaryOpenClKernels(Registrar& registrar, const UnaryOp (&ops)[N], const std::string& source,
                                const char* file, int line) {
  for (const UnaryOp& op : ops) {
    RegisterOpenClKernels<UnaryKernel>(registrar, op.type, file, line, &op, &source);
    RegisterOpenClKernels<UnaryGradKernel>(registrar, std::string(op.type) + "_grad", file, line, &op, &source);
  }
}

}  // namespace nabla::opencl
