// reduce_sum and reduce_mean: X summed (or averaged) over the dims in `dim`.
// One file for the pair: they share schema, kernels and gradient and differ
// only in the division by the count.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

struct ReducePlan {
  Shape keep;         // the output shape with reduced dims kept as 1
  int64_t count = 1;  // elements summed into each output element
};

inline ReducePlan MakeReducePlan(const ExecutionContext& ctx, const Shape& x) {
  std::vector<bool> mask = ReducedDims(x, ctx.Attr<std::vector<int>>("dim"), ctx.Attr<bool>("reduce_all"),
                                       StrCat("op '", ctx.Op().Type(), "'"));
  ReducePlan p{KeepDimShape(x, mask), 1};
  for (size_t i = 0; i < x.size(); ++i)
    if (mask[i]) p.count *= x[i];
  return p;
}

// reduce_sum and reduce_mean (X -> Out; dim, keep_dim, reduce_all) and their
// grad ops, which spread Out@GRAD (divided by the count for the mean) back
// over the reduced dims.
template <typename T>
void ReduceForward(const ExecutionContext& ctx, bool mean) {
  const Tensor& x = ctx.Input("X");
  ReducePlan p = MakeReducePlan(ctx, x.GetShape());
  Tensor* out = ctx.Output("Out");
  T* o = AllocOutput<T>(ctx, out);
  using Acc = std::conditional_t<std::is_integral_v<T>, T, double>;
  const T* xd = x.Data<T>();
  auto finish = [&](Acc a) { return static_cast<T>(mean && p.count > 0 ? a / static_cast<Acc>(p.count) : a); };
  ReduceView v;
  if (MakeReduceView(x.GetShape(), p.keep, &v)) {
    if (v.outer * v.inner == 1) {  // everything into one element
      o[0] = finish(DeterministicSum<Acc>(x.Numel(), [&](int64_t i) { return static_cast<Acc>(xd[i]); }));
      return;
    }
    std::vector<Acc> acc(static_cast<size_t>(out->Numel()), Acc(0));
    ParallelReduceWalk(v, [&](int64_t ix, int64_t io) { acc[io] += static_cast<Acc>(xd[ix]); });
    cpu::ParallelFor(out->Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = finish(acc[i]);
    });
    return;
  }
  std::vector<Acc> acc(static_cast<size_t>(out->Numel()), Acc(0));
  BroadcastIndexer(x.GetShape(), x.GetShape(), p.keep).ForEach([&](int64_t, int64_t ix, int64_t io) {
    acc[io] += static_cast<Acc>(xd[ix]);
  });
  for (size_t i = 0; i < acc.size(); ++i) o[i] = finish(acc[i]);
}

template <typename T>
void ReduceBackward(const ExecutionContext& ctx, bool mean) {
  Tensor* dx = ctx.Output("X@GRAD");
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  ReducePlan p = MakeReducePlan(ctx, x.GetShape());
  const T* dod = ctx.Input("Out@GRAD").Data<T>();
  T* g = AllocOutput<T>(ctx, dx, x.GetShape());
  T scale = mean && p.count > 0 ? T(1) / static_cast<T>(p.count) : T(1);
  BroadcastIndexer(x.GetShape(), x.GetShape(), p.keep).ParallelForEach([&](int64_t, int64_t ix, int64_t io) {
    g[ix] = dod[io] * scale;
  });
}

inline void InferReduceShape(InferShapeContext& c) {
  Shape x = c.InputShape("X");
  std::vector<bool> mask = ReducedDims(x, c.Attr<std::vector<int>>("dim"), c.Attr<bool>("reduce_all"), c.Where());
  c.SetOutputShape("Out", ReducedShape(x, mask, c.Attr<bool>("keep_dim")));
  c.SetOutputDType("Out", c.InputDType("X"));
}

template <typename T>
struct ReduceSumKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceForward<T>(ctx, false); }
};
template <typename T>
struct ReduceSumGradKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceBackward<T>(ctx, false); }
};
template <typename T>
struct ReduceMeanKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceForward<T>(ctx, true); }
};
template <typename T>
struct ReduceMeanGradKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceBackward<T>(ctx, true); }
};

// The schema both reductions share.
inline OpBuilder& ReduceOpSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                                 const char* file, int line) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Precision(OpPrecision::kFloat32)
          .Doc(doc)
          .Input("X", "(Tensor) the input")
          .Output("Out", "(Tensor) the reduced tensor")
          .Attr<std::vector<int>>("dim", {0},
                                  "(ints, default [0]) the dims to reduce; negative dims count from the end, "
                                  "and an empty list reduces every dim")
          .Attr<bool>("keep_dim", false, "(bool, default false) keep reduced dims as 1 instead of removing them")
          .Attr<bool>("reduce_all", false,
                      "(bool, default false) reduce every dim, whatever dim says; "
                      "Out is then [1] (or all 1s with keep_dim)")
          .InferShape(InferReduceShape)
          .template GradMaker<DefaultGradOpDescMaker>();
  registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
  return b;
}

NABLA_REGISTER_OPS(reduce_sum) {
  ReduceOpSchema(registrar, "reduce_sum", "Out = the sum of X over the dims in `dim` (or all dims).", __FILE__,
                 __LINE__)
      .GradCheck(CheckCase("dim0", {CheckInput("X", {3, 4})}))
      .GradCheck(CheckCase("negative_dims_keep", {CheckInput("X", {2, 3, 4})},
                           {{"dim", std::vector<int>{-1, 0}}, {"keep_dim", true}}))
      .GradCheck(CheckCase("all", {CheckInput("X", {2, 3})}, {{"reduce_all", true}}));
  RegisterCpuKernels<ReduceSumKernel, float, double, int32_t, int64_t>(registrar, "reduce_sum", __FILE__, __LINE__);
  RegisterCpuKernels<ReduceSumGradKernel, float, double>(registrar, "reduce_sum_grad", __FILE__, __LINE__);
}

NABLA_REGISTER_OPS(reduce_mean) {
  ReduceOpSchema(registrar, "reduce_mean", "Out = the mean of X over the dims in `dim` (or all dims).", __FILE__,
                 __LINE__)
      .GradCheck(CheckCase("dim0", {CheckInput("X", {3, 4})}))
      .GradCheck(CheckCase("middle_dim", {CheckInput("X", {2, 3, 4})}, {{"dim", std::vector<int>{1}}}))
      .GradCheck(CheckCase("all_keep", {CheckInput("X", {2, 3})}, {{"reduce_all", true}, {"keep_dim", true}}));
  RegisterCpuKernels<ReduceMeanKernel, float, double>(registrar, "reduce_mean", __FILE__, __LINE__);
  RegisterCpuKernels<ReduceMeanGradKernel, float, double>(registrar, "reduce_mean_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
