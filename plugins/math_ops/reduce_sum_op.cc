// reduce_sum: sums X over the dims in `dim`.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(reduce_sum) {
  ReduceOpSchema(registrar, "reduce_sum", "Out = the sum of X over the dims in `dim` (or all dims).", __FILE__,
                 __LINE__)
      .Precision(OpPrecision::kFloat32)
      .GradCheck(CheckCase("dim0", {CheckInput("X", {3, 4})}))
      .GradCheck(CheckCase("negative_dims_keep", {CheckInput("X", {2, 3, 4})},
                           {{"dim", std::vector<int>{-1, 0}}, {"keep_dim", true}}))
      .GradCheck(CheckCase("all", {CheckInput("X", {2, 3})}, {{"reduce_all", true}}));
  RegisterCpuKernels<ReduceSumKernel, float, double, int32_t, int64_t>(registrar, "reduce_sum", __FILE__, __LINE__);
  RegisterCpuKernels<ReduceSumGradKernel, float, double>(registrar, "reduce_sum_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
