// mul's and matmul's after-backward rewrites (plugins/math_ops/
// gemm_grad_passes.cc, the file itself) built over the C ABI and registered
// by an op of their own, so that c_abi_test runs them through the C ABI's
// program passes next to the standard build's on the same programs.
#include "gemm_grad_passes.h"
#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_sdk_gemm_passes) {
  auto& op = registrar.Op("toy_gemm_passes", __FILE__, __LINE__)
                 .Doc("Carries mul's and matmul's after-backward rewrites; computes nothing.")
                 .Input("X", "(Tensor) input")
                 .Output("Out", "(Tensor) output")
                 .GradMaker<nabla::EmptyGradOpDescMaker>();
  // The standard build's order: ops in name order, matmul before mul.
  for (const char* grad : {"matmul_grad", "mul_grad"})
    op.RewritesAfterBackward(nabla::math_ops::ShareTransposedWeightsPass(grad))
        .RewritesAfterBackward(nabla::math_ops::ChainWeightGradientsPass(grad))
        .RewritesAfterBackward(nabla::math_ops::ApplySgdInWeightGradientsPass(grad));
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
