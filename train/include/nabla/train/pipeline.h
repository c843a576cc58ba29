#pragma once
// The one order of the program passes that turns a forward program into
// what trains: FuseOps -> precision -> AppendBackward -> FoldBf16Casts ->
// the gradient allreduces -> the optimizer -> FuseGradOps. `nabla run`,
// `nabla exec`, `nabla backward`, `nabla graph`, the Python module and
// embedding programs all call ApplyPassPipeline, so a program shown, run or
// trained by any of them went through the same passes in the same order.
//
//   train::PassPipelineOptions o;
//   o.loss = "loss";
//   o.optimizer = train::OptimizerOptions{};  // sgd, lr 0.01
//   const train::PassPipelineResult r = train::ApplyPassPipeline(program, o);
//
// Why this order: fused forward ops bring their own gradients, so FuseOps
// runs before the backward part; mixed precision too, so the casts'
// gradients bring every gradient back to float32 before the optimizer reads
// it; the allreduces sum the gradients the optimizer then reads; and the
// gradient rewrites (FuseGradOps) may take over an optimizer's sgd step, so
// they come last.
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/backward.h"
#include "nabla/program.h"
#include "nabla/train.h"
#include "nabla/train/data_parallel.h"
#include "nabla/types.h"

namespace nabla::train {

struct PassPipelineOptions {
  // The device the program will run on. The fusion passes run on the cpu
  // only (the fused ops have cpu kernels alone), and so does bf16.
  DeviceType device = DeviceType::kCPU;
  // FuseOps before the backward part and FuseGradOps after the optimizer.
  bool fuse = false;
  // Vars the fusion passes must leave as they are (fetched results); the
  // loss is always kept.
  std::unordered_set<std::string> keep;
  // "fp32" or "bf16" (ApplyPrecision, nabla/train/precision.h); an unknown
  // value is an error naming `precision_where`. Fallback notes go to `note`.
  std::string precision = "fp32";
  std::string precision_where = "--precision";
  std::ostream* note = &std::cerr;

  // The loss whose backward part is appended; empty: no backward part (then
  // only the forward passes run, and there are no gradients to reduce or
  // apply).
  std::string loss;
  std::vector<std::string> params;  // empty: every trainable parameter
  std::unordered_set<std::string> no_grad;

  // The gradient allreduces (data_parallel.h), when set (`nabla run` sets
  // it for more than one rank, `nabla backward --data-parallel N` for any N).
  std::optional<DataParallelOptions> data_parallel;
  // The optimizer's update ops (nabla/train.h), when set.
  std::optional<OptimizerOptions> optimizer;

  // Which passes run: all of them, or the part up to the allreduces
  // (kUntilOptimizer) and the rest (kFromOptimizer) as two calls, for a
  // front-end that appends the optimizer as a step of its own (Python's
  // append_backward, then append_optimizer).
  enum class Stages { kAll, kUntilOptimizer, kFromOptimizer };
  Stages stages = Stages::kAll;
  // kFromOptimizer only: the gradients the first part returned.
  ParamGrads param_grads;

  // Called on the program after the forward passes (fusion, precision),
  // before the backward part: where a front-end takes its evaluation
  // program or checks names against what fusion left.
  std::function<void(ProgramDesc&)> before_backward;
  // Called with the gradients right after the backward part (and bf16's
  // fold), before the allreduces and the optimizer read them.
  std::function<void(const ParamGrads&)> after_backward;
};

struct PassPipelineResult {
  ParamGrads param_grads;  // empty without a backward part
  bool bf16 = false;       // the bf16 mixed-precision pass ran
};

// Applies the passes `options` asks for to `program`, in place, in the one
// order above. Plugins must be loaded (the passes and the optimizer name
// their ops).
PassPipelineResult ApplyPassPipeline(ProgramDesc& program, const PassPipelineOptions& options);

}  // namespace nabla::train
