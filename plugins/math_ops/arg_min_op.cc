// arg_min: the int64 position of the smallest element along `axis` (the
// first one on ties; NaN counts as the smallest, as in PyTorch). No gradient.
// arg_util.h holds what it shares with arg_max.
#include "arg_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

template <typename T>
using ArgMinKernel = ArgExtremumKernel<T, false>;

NABLA_REGISTER_OPS(arg_min) {
  ArgExtremumSchema(registrar, "arg_min",
                    "Out = the index (int64) of the smallest element of X along `axis` (over all of X when `flatten`); "
                    "ties give the first index and NaN counts as the smallest. Has no gradient.",
                    __FILE__, __LINE__);
  RegisterCpuKernels<ArgMinKernel, float, double, int32_t, int64_t>(registrar, "arg_min", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
