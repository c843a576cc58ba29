// reduce_all: whether every element of bool X over the dims in `dim` is
// true. Bool in, bool out, no gradient (Paddle's).
#include "nabla/plugin.h"
#include "reduce_util.h"

namespace nabla::math_ops {
namespace {

template <typename T>
struct ReduceAllKernel {
  void operator()(const ExecutionContext& ctx) const {
    ReduceFold<T, T>(ctx, true, [](T a, T x) { return a && x; });
  }
};

NABLA_REGISTER_OPS(reduce_all) {
  ReduceOpSchema(registrar, "reduce_all",
                 "Out (bool) = true where every element of X over the dims in `dim` (or all dims) is true. An empty "
                 "reduction is true. X must be bool; no gradient.",
                 __FILE__, __LINE__,
                 /*differentiable=*/false);
  RegisterCpuKernels<ReduceAllKernel, bool>(registrar, "reduce_all", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
