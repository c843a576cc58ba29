#include "nabla/train/pipeline.h"

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/fusion.h"
#include "nabla/mixed_precision.h"
#include "nabla/train/precision.h"

namespace nabla::train {

PassPipelineResult ApplyPassPipeline(ProgramDesc& program, const PassPipelineOptions& o) {
  using Stages = PassPipelineOptions::Stages;
  PassPipelineResult result;
  // The fused ops have cpu kernels alone; on another device they would run
  // on host copies.
  const bool fuse = o.fuse && o.device == DeviceType::kCPU;
  std::unordered_set<std::string> keep = o.keep;
  if (!o.loss.empty()) keep.insert(o.loss);
  // A var no gradient may pass through must stay a var for the gradient to
  // stop there: fusing it into an op would let the gradient flow on.
  keep.insert(o.no_grad.begin(), o.no_grad.end());

  if (o.stages != Stages::kFromOptimizer) {
    // bf16 runs where ApplyPrecision below will convert the program.
    const bool bf16_next = o.precision == "bf16" && o.device == DeviceType::kCPU && cpu::HasBf16Gemm();
    if (fuse) FuseOps(program, keep, bf16_next);
    result.bf16 = ApplyPrecision(program, o.precision, o.device, *o.note, o.precision_where);
    // With fusion, ops between two bfloat16 GEMMs run in bfloat16 too.
    if (result.bf16 && fuse) ElideBf16Casts(program, keep, o.device);
    if (o.before_backward) o.before_backward(program);
    if (!o.loss.empty()) result.param_grads = AppendBackward(program, o.loss, o.params, o.no_grad);
    if (result.bf16) FoldBf16Casts(program, o.device);
    if (o.loss.empty()) return result;
    if (o.after_backward) o.after_backward(result.param_grads);
    if (o.data_parallel) InsertGradientAllreduce(program, result.param_grads, *o.data_parallel);
    if (o.stages == Stages::kUntilOptimizer) return result;
  } else {
    result.param_grads = o.param_grads;
  }
  if (o.optimizer) AppendOptimizer(program, result.param_grads, *o.optimizer);
  if (fuse) FuseGradOps(program, keep);
  return result;
}

}  // namespace nabla::train
