// reduce_mean: averages X over the dims in `dim`.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(reduce_mean) {
  ReduceOpSchema(registrar, "reduce_mean", "Out = the mean of X over the dims in `dim` (or all dims).", __FILE__,
                 __LINE__)
      .Precision(OpPrecision::kFloat32)
      .GradCheck(CheckCase("dim0", {CheckInput("X", {3, 4})}))
      .GradCheck(CheckCase("middle_dim", {CheckInput("X", {2, 3, 4})}, {{"dim", std::vector<int>{1}}}))
      .GradCheck(CheckCase("all_keep", {CheckInput("X", {2, 3})}, {{"reduce_all", true}, {"keep_dim", true}}));
  RegisterCpuKernels<ReduceMeanKernel, float, double>(registrar, "reduce_mean", __FILE__, __LINE__);
  RegisterCpuKernels<ReduceMeanGradKernel, float, double>(registrar, "reduce_mean_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
