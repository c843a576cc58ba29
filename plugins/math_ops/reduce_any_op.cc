// reduce_any: whether some element of bool X over the dims in `dim` is
// true. Bool in, bool out, no gradient (Paddle's).
#include "nabla/plugin.h"
#include "reduce_util.h"

namespace nabla::math_ops {
namespace {

template <typename T>
struct ReduceAnyKernel {
  void operator()(const ExecutionContext& ctx) const {
    ReduceFold<T, T>(ctx, false, [](T a, T x) { return a || x; });
  }
};

NABLA_REGISTER_OPS(reduce_any) {
  ReduceOpSchema(registrar, "reduce_any",
                 "Out (bool) = true where some element of X over the dims in `dim` (or all dims) is true. An empty "
                 "reduction is false. X must be bool; no gradient.",
                 __FILE__, __LINE__,
                 /*differentiable=*/false);
  RegisterCpuKernels<ReduceAnyKernel, bool>(registrar, "reduce_any", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
