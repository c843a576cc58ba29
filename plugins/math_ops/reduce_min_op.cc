// reduce_min: the smallest element of X over the dims in `dim` (NaN wins).
// The gradient is Paddle's: Out@GRAD goes to every element equal to the min.
#include "nabla/plugin.h"
#include "reduce_util.h"

namespace nabla::math_ops {
namespace {

template <typename T>
using ReduceMinKernel = ReduceExtremumKernel<T, false>;

NABLA_REGISTER_OPS(reduce_min) {
  ReduceOpSchema(registrar, "reduce_min",
                 "Out = the smallest element of X over the dims in `dim` (or all dims); NaN if one is NaN. The "
                 "gradient sends Out@GRAD to every element equal to Out (Paddle's rule for ties).",
                 __FILE__, __LINE__)
      .GradCheck(CheckCase("dim0", {CheckInput("X", {3, 4})}))
      .GradCheck(CheckCase("negative_dims_keep", {CheckInput("X", {2, 3, 4})},
                           {{"dim", std::vector<int>{-1, 0}}, {"keep_dim", true}}))
      .GradCheck(CheckCase("all", {CheckInput("X", {2, 3})}, {{"reduce_all", true}}));
  RegisterCpuKernels<ReduceMinKernel, float, double, int32_t, int64_t>(registrar, "reduce_min", __FILE__, __LINE__);
  RegisterCpuKernels<ReduceExtremumGradKernel, float, double>(registrar, "reduce_min_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
