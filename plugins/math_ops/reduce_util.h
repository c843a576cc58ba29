#pragma once
// What the reduce_* ops share (reduce_op.cc's sum and mean, reduce_max,
// reduce_min, reduce_prod, reduce_all, reduce_any): Paddle's schema (X ->
// Out over `dim`, `keep_dim`, `reduce_all`), its shape inference, the plan of
// one reduction, a fold of X into Out, and the max/min gradient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {

struct ReducePlan {
  Shape keep;         // the output shape with reduced dims kept as 1
  int64_t count = 1;  // elements reduced into each output element
};

inline ReducePlan MakeReducePlan(const ExecutionContext& ctx, const Shape& x) {
  std::vector<bool> mask = ReducedDims(x, ctx.Attr<std::vector<int>>("dim"), ctx.Attr<bool>("reduce_all"),
                                       StrCat("op '", ctx.Op().Type(), "'"));
  ReducePlan p{KeepDimShape(x, mask), 1};
  for (size_t i = 0; i < x.size(); ++i)
    if (mask[i]) p.count *= x[i];
  return p;
}

inline void InferReduceShape(InferShapeContext& c) {
  Shape x = c.InputShape("X");
  std::vector<bool> mask = ReducedDims(x, c.Attr<std::vector<int>>("dim"), c.Attr<bool>("reduce_all"), c.Where());
  c.SetOutputShape("Out", ReducedShape(x, mask, c.Attr<bool>("keep_dim")));
  c.SetOutputDType("Out", c.InputDType("X"));
}

// The schema every reduction shares. `differentiable`: a DefaultGradOpDescMaker
// (X, Out, Out@GRAD -> X@GRAD) and its grad op; otherwise none (reduce_all,
// reduce_any, whose X and Out are bool).
inline OpBuilder& ReduceOpSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                                 const char* file, int line, bool differentiable = true) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Doc(doc)
          .Input("X", "(Tensor) the input")
          .Output("Out", "(Tensor) the reduced tensor")
          .Attr<std::vector<int>>("dim", {0},
                                  "(ints, default [0]) the dims to reduce; negative dims count from the end, "
                                  "and an empty list reduces every dim")
          .Attr<bool>("keep_dim", false, "(bool, default false) keep reduced dims as 1 instead of removing them")
          .Attr<bool>("reduce_all", false,
                      "(bool, default false) reduce every dim, whatever dim says; "
                      "Out is then [1] (or all 1s with keep_dim)");
  if (!differentiable) {
    b.InferShape([](InferShapeContext& c) {
       NABLA_ENFORCE(c.InputDType("X") == DType::kBool, kInvalidArgument, c.Where(), ": X must be bool, but received ",
                     DTypeName(c.InputDType("X")));
       InferReduceShape(c);
     }).GradMaker<EmptyGradOpDescMaker>();
    return b;
  }
  b.Precision(OpPrecision::kFloat32).InferShape(InferReduceShape).template GradMaker<DefaultGradOpDescMaker>();
  registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
  return b;
}

// Out[o] = combine(... combine(combine(init, x0), x1) ..., xn) over the
// elements of X that reduce into o, in row-major order (so the result does
// not depend on the thread count), accumulated in Acc.
template <typename T, typename Acc, typename Combine>
void ReduceFold(const ExecutionContext& ctx, Acc init, Combine combine) {
  const Tensor& x = ctx.Input("X");
  const ReducePlan p = MakeReducePlan(ctx, x.GetShape());
  Tensor* out = ctx.Output("Out");
  T* o = AllocOutput<T>(ctx, out);
  const T* xd = x.Data<T>();
  auto fold = [&](Acc* acc) {
    std::fill(acc, acc + out->Numel(), init);
    ReduceView v;
    if (MakeReduceView(x.GetShape(), p.keep, &v)) {
      ParallelReduceWalk(v, [&](int64_t ix, int64_t io) { acc[io] = combine(acc[io], xd[ix]); });
      return;
    }
    BroadcastIndexer(x.GetShape(), x.GetShape(), p.keep).ForEach([&](int64_t, int64_t ix, int64_t io) {
      acc[io] = combine(acc[io], xd[ix]);
    });
  };
  if constexpr (std::is_same_v<T, Acc>) {
    fold(o);
  } else {
    std::vector<Acc> acc(static_cast<size_t>(out->Numel()));
    fold(acc.data());
    for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<T>(acc[i]);
  }
}

// reduce_max (kMax) and reduce_min: NaN wins, as in PyTorch's amax/amin; an
// empty reduction gives the fold's start, -inf (max) or +inf (min), the
// lowest or highest integer.
template <typename T, bool kMax>
struct ReduceExtremumKernel {
  void operator()(const ExecutionContext& ctx) const {
    constexpr T start = std::is_floating_point_v<T>
                            ? (kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity())
                            : (kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
    ReduceFold<T, T>(ctx, start, [](T a, T x) {
      if constexpr (std::is_floating_point_v<T>)
        if (std::isnan(x)) return x;
      return (kMax ? x > a : x < a) ? x : a;
    });
  }
};

// Paddle's reduce_max_grad and reduce_min_grad: X@GRAD = Out@GRAD where X
// equals Out, 0 elsewhere, so every tied extremum gets the whole Out@GRAD.
template <typename T>
struct ReduceExtremumGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output("X@GRAD");
    if (!dx) return;
    const Tensor& x = ctx.Input("X");
    const ReducePlan p = MakeReducePlan(ctx, x.GetShape());
    const T* xd = x.Data<T>();
    const T* od = ctx.Input("Out").Data<T>();
    const T* dod = ctx.Input("Out@GRAD").Data<T>();
    T* g = AllocOutput<T>(ctx, dx, x.GetShape());
    // Out without keep_dim has the kept shape's elements in the same order.
    BroadcastIndexer(x.GetShape(), x.GetShape(), p.keep).ParallelForEach([&](int64_t, int64_t ix, int64_t io) {
      g[ix] = xd[ix] == od[io] ? dod[io] : T(0);
    });
  }
};

}  // namespace nabla::math_ops
