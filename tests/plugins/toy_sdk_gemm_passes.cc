// mul's and matmul's after-backward rewrites (plugins/math_ops/
// gemm_grad_passes.cc, the file itself) built over the C ABI and registered
// by an op of their own, so that c_abi_test runs them through the C ABI's
// program passes next to the standard build's on the same programs; and a
// before-backward pass of its own that checks EvaluateOnHost over the C ABI.
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "gemm_grad_passes.h"
#include "nabla/fusion.h"
#include "nabla/plugin.h"

namespace {

// Sets `scale` of a scale op right before a toy_gemm_passes op to 3 (an edit
// the core gets only when the SDK sends it: EvaluateOnHost must send it
// first), then evaluates the toy op's X from all the ops before it and writes
// the sum of its values to the toy op's attribute `folded`.
size_t FoldIntoToyOp(nabla::ProgramDesc& program, const std::unordered_set<std::string>&) {
  nabla::BlockDesc& block = *program.Root();
  size_t changed = 0;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    nabla::OpDesc& op = *block.Op(i);
    if (op.Type() != "toy_gemm_passes" || op.HasAttr("folded")) continue;
    if (i > 0 && block.Op(i - 1)->Type() == "scale") block.Op(i - 1)->SetAttr("scale", 3.0f);
    std::vector<size_t> before(i);
    std::iota(before.begin(), before.end(), size_t{0});
    const auto& value = nabla::EvaluateOnHost(block, before, op.Input("X")[0]);
    float sum = 0.0f;
    for (int64_t k = 0; k < value.Numel(); ++k) sum += value.Data<float>()[k];
    op.SetAttr("folded", sum);
    ++changed;
  }
  return changed;
}

}  // namespace

NABLA_REGISTER_OPS(toy_sdk_gemm_passes) {
  auto& op = registrar.Op("toy_gemm_passes", __FILE__, __LINE__)
                 .Doc("Carries mul's and matmul's after-backward rewrites; computes nothing.")
                 .Input("X", "(Tensor) input")
                 .Output("Out", "(Tensor) output")
                 .GradMaker<nabla::EmptyGradOpDescMaker>();
  op.RewritesBeforeBackward({"fold_into_toy_op", &FoldIntoToyOp});
  // The standard build's order: ops in name order, matmul before mul.
  for (const char* grad : {"matmul_grad", "mul_grad"})
    op.RewritesAfterBackward(nabla::math_ops::ShareTransposedWeightsPass(grad))
        .RewritesAfterBackward(nabla::math_ops::ChainWeightGradientsPass(grad))
        .RewritesAfterBackward(nabla::math_ops::ApplySgdInWeightGradientsPass(grad));
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
