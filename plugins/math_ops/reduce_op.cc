// reduce_sum and reduce_mean: X summed (or averaged) over the dims in `dim`.
// One file for the pair: they share schema, kernels and gradient and differ
// only in the division by the count; reduce_util.h holds what every
// reduction shares.
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "nabla/plugin.h"
#include "reduce_util.h"

namespace nabla::math_ops {
namespace {

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
  // The mean of no elements (a reduced dim of size 0) is NaN, as Paddle's
  // kernel, NumPy and PyTorch give it; the sum of none is 0.
  auto finish = [&](Acc a) {
    if (!mean) return static_cast<T>(a);
    if (p.count == 0) return std::numeric_limits<T>::quiet_NaN();
    return static_cast<T>(a / static_cast<Acc>(p.count));
  };
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
  ReduceOpSchema(registrar, "reduce_mean",
                 "Out = the mean of X over the dims in `dim` (or all dims); NaN where they hold no elements.", __FILE__,
                 __LINE__)
      .GradCheck(CheckCase("dim0", {CheckInput("X", {3, 4})}))
      .GradCheck(CheckCase("middle_dim", {CheckInput("X", {2, 3, 4})}, {{"dim", std::vector<int>{1}}}))
      .GradCheck(CheckCase("all_keep", {CheckInput("X", {2, 3})}, {{"reduce_all", true}, {"keep_dim", true}}));
  RegisterCpuKernels<ReduceMeanKernel, float, double>(registrar, "reduce_mean", __FILE__, __LINE__);
  RegisterCpuKernels<ReduceMeanGradKernel, float, double>(registrar, "reduce_mean_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
