// stack: the tensors of X (all of one shape) joined along a new dim `axis`
// of Y. The gradient cuts Y@GRAD back into one slice per X.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Y's new dim sits at `axis` of a shape one rank higher than X's.
int StackAxis(int axis, size_t x_rank, const std::string& where) {
  return NormalizeAxis(axis, x_rank + 1, "axis", where);
}

void InferStackShape(InferShapeContext& c) {
  const size_t n = c.InputSize("X");
  NABLA_ENFORCE(n >= 1, kInvalidArgument, c.Where(), ": X must name at least one tensor, but received none");
  Shape x = c.InputShape("X", 0);
  const DType dtype = c.InputDType("X", 0);
  for (size_t i = 1; i < n; ++i) {
    const Shape s = c.InputShape("X", i);
    NABLA_ENFORCE(c.InputDType("X", i) == dtype, kInvalidArgument, c.Where(), ": every X must have dtype ",
                  DTypeName(dtype), ", but X[", i, "] is ", DTypeName(c.InputDType("X", i)));
    bool same = s.size() == x.size();
    for (size_t d = 0; same && d < s.size(); ++d) same = x[d] < 0 || s[d] < 0 || x[d] == s[d];
    NABLA_ENFORCE(same, kInvalidArgument, c.Where(), ": every X must have the shape of X[0], ", ShapeToString(x),
                  ", but X[", i, "] has shape ", ShapeToString(s));
    for (size_t d = 0; d < s.size(); ++d)
      if (x[d] < 0) x[d] = s[d];
  }
  const int axis = StackAxis(c.Attr<int>("axis"), x.size(), c.Where());
  x.insert(x.begin() + axis, static_cast<int64_t>(n));
  c.SetOutputShape("Y", x);
  c.SetOutputDType("Y", dtype);
}

// Y seen as [outer, n, inner]: X[i] fills Y[:, i, :].
template <typename T>
struct StackKernel {
  void operator()(const ExecutionContext& ctx) const {
    std::vector<const Tensor*> xs = ctx.MultiInput("X");
    const Shape& x = xs[0]->GetShape();
    const int axis = StackAxis(ctx.Attr<int>("axis"), x.size(), "op 'stack'");
    const int64_t n = static_cast<int64_t>(xs.size());
    const int64_t outer = ProductOf(x, 0, axis), inner = ProductOf(x, axis, x.size());
    Shape y = x;
    y.insert(y.begin() + axis, n);
    T* dst = AllocOutput<T>(ctx, ctx.Output("Y"), y);
    for (int64_t i = 0; i < n; ++i) {
      NABLA_ENFORCE(xs[i]->GetShape() == x, kInvalidArgument, "op 'stack': every X must have the shape of X[0], ",
                    ShapeToString(x), ", but X[", i, "] has shape ", ShapeToString(xs[i]->GetShape()));
      const T* src = xs[i]->Data<T>();
      for (int64_t o = 0; o < outer; ++o) std::copy(src + o * inner, src + (o + 1) * inner, dst + (o * n + i) * inner);
    }
  }
};

template <typename T>
struct StackGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& dy = ctx.Input("Y@GRAD");
    std::vector<Tensor*> dxs = ctx.MultiOutput("X@GRAD");
    const int64_t n = static_cast<int64_t>(ctx.InputSize("X"));
    const Shape& x = ctx.Input("X").GetShape();
    const int axis = StackAxis(ctx.Attr<int>("axis"), x.size(), "op 'stack_grad'");
    const int64_t outer = ProductOf(x, 0, axis), inner = ProductOf(x, axis, x.size());
    NABLA_ENFORCE(dy.Numel() == outer * n * inner, kInvalidArgument, "op 'stack_grad': expected Y@GRAD with ",
                  outer * n * inner, " elements, but received shape ", ShapeToString(dy.GetShape()));
    const T* src = dy.Data<T>();
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(dxs.size()); ++i) {
      if (!dxs[i]) continue;
      T* dst = AllocOutput<T>(ctx, dxs[i], x);
      for (int64_t o = 0; o < outer; ++o) {
        const T* from = src + (o * n + i) * inner;
        std::copy(from, from + inner, dst + o * inner);
      }
    }
  }
};

GradCheckInput Several(GradCheckInput in, int count) {
  in.count = count;
  return in;
}

NABLA_REGISTER_OPS(stack) {
  registrar.Op("stack", __FILE__, __LINE__)
      .Doc("Y = the tensors of X, all of one shape and dtype, stacked along a new dim at `axis` of Y.")
      .Input("X", "(Tensor[]) the tensors to stack", kDuplicable)
      .Output("Y", "(Tensor) the stacked tensor, of rank rank(X) + 1")
      .Attr<int>("axis", 0,
                 "(int, default 0) where the new dim sits in Y, in [-(rank(X) + 1), rank(X) + 1); negative counts "
                 "from the end of Y")
      .InferShape(InferStackShape)
      .GradMaker<GradFromInputsMaker>()
      .GradCheck(CheckCase("three_axis1", {Several(CheckInput("X", {2, 3}), 3)}, {{"axis", 1}}, {{"Y", 1}}))
      .GradCheck(CheckCase("two_last_axis", {Several(CheckInput("X", {2, 2}), 2)}, {{"axis", -1}}, {{"Y", 1}}));
  registrar.DefaultGradOp("stack", __FILE__, __LINE__).InferShape([](InferShapeContext& c) {
    for (size_t i = 0; i < c.OutputSize("X@GRAD"); ++i) c.ShareShapeAndDType("X", "X@GRAD", i, i);
  });
  RegisterCpuKernels<StackKernel, float, double, int32_t, int64_t>(registrar, "stack", __FILE__, __LINE__);
  RegisterCpuKernels<StackGradKernel, float, double>(registrar, "stack_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
