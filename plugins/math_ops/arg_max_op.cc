// arg_max: the int64 position of the largest element along `axis` (the
// first one on ties; NaN counts as the largest, as in PyTorch). No gradient.
// arg_util.h holds what it shares with arg_min.
#include "arg_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

template <typename T>
using ArgMaxKernel = ArgExtremumKernel<T, true>;

NABLA_REGISTER_OPS(arg_max) {
  ArgExtremumSchema(registrar, "arg_max",
                    "Out = the index (int64) of the largest element of X along `axis` (over all of X when `flatten`); "
                    "ties give the first index and NaN counts as the largest. Has no gradient.",
                    __FILE__, __LINE__);
  RegisterCpuKernels<ArgMaxKernel, float, double, int32_t, int64_t>(registrar, "arg_max", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
