// reduce_prod: the product of X over the dims in `dim`. Paddle's gradient is
// Out@GRAD * Out / X, which a zero in X turns into 0/0; here each element
// gets Out@GRAD times the product of the others, from the count of zeros
// and the product of the non-zero elements of its group: no zero, that
// product / X; one zero, the zero gets the product and the rest 0; more, 0.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "nabla/plugin.h"
#include "reduce_util.h"

namespace nabla::math_ops {
namespace {

// Floats multiply in double; integers wrap as two's complement (through
// unsigned arithmetic, where signed overflow would be undefined).
template <typename T>
struct ReduceProdKernel {
  void operator()(const ExecutionContext& ctx) const {
    if constexpr (std::is_floating_point_v<T>) {
      ReduceFold<T, double>(ctx, 1.0, [](double a, T x) { return a * static_cast<double>(x); });
    } else {
      using U = std::make_unsigned_t<T>;
      ReduceFold<T, T>(ctx, T(1), [](T a, T x) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(x)); });
    }
  }
};

template <typename T>
struct ReduceProdGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output("X@GRAD");
    if (!dx) return;
    const Tensor& x = ctx.Input("X");
    const ReducePlan p = MakeReducePlan(ctx, x.GetShape());
    const T* xd = x.Data<T>();
    const T* dod = ctx.Input("Out@GRAD").Data<T>();
    T* g = AllocOutput<T>(ctx, dx, x.GetShape());
    const size_t groups = static_cast<size_t>(NumElements(p.keep));
    std::vector<int64_t> zeros(groups, 0);
    std::vector<double> nonzero_prod(groups, 1.0);
    const BroadcastIndexer walk(x.GetShape(), x.GetShape(), p.keep);
    walk.ForEach([&](int64_t, int64_t ix, int64_t io) {
      if (xd[ix] == T(0))
        ++zeros[io];
      else
        nonzero_prod[io] *= static_cast<double>(xd[ix]);
    });
    walk.ParallelForEach([&](int64_t, int64_t ix, int64_t io) {
      const double d = static_cast<double>(dod[io]);
      double v = 0.0;
      if (zeros[io] == 0)
        v = d * nonzero_prod[io] / static_cast<double>(xd[ix]);
      else if (zeros[io] == 1 && xd[ix] == T(0))
        v = d * nonzero_prod[io];
      g[ix] = static_cast<T>(v);
    });
  }
};

NABLA_REGISTER_OPS(reduce_prod) {
  GradCheckSpec one_zero = CheckCase("one_zero", {CheckInput("X", {2, 3})}, {{"dim", std::vector<int>{1}}});
  one_zero.inputs[0].values = {0.5, 0.0, -0.8, 0.7, 0.3, -0.6};
  GradCheckSpec two_zeros = CheckCase("two_zeros_all", {CheckInput("X", {2, 3})}, {{"reduce_all", true}});
  two_zeros.inputs[0].values = {0.5, 0.0, -0.8, 0.7, 0.0, -0.6};
  ReduceOpSchema(registrar, "reduce_prod",
                 "Out = the product of X over the dims in `dim` (or all dims). The gradient is Out@GRAD times the "
                 "product of the other elements, finite where X has zeros.",
                 __FILE__, __LINE__)
      .GradCheck(CheckCase("dim0", {CheckInput("X", {3, 4}, 0.5, 1.5)}))
      .GradCheck(CheckCase("negative_dims_keep", {CheckInput("X", {2, 3, 4})},
                           {{"dim", std::vector<int>{-1, 0}}, {"keep_dim", true}}))
      .GradCheck(one_zero)
      .GradCheck(two_zeros);
  RegisterCpuKernels<ReduceProdKernel, float, double, int32_t, int64_t>(registrar, "reduce_prod", __FILE__, __LINE__);
  RegisterCpuKernels<ReduceProdGradKernel, float, double>(registrar, "reduce_prod_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
