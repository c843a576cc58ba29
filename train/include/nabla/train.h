#pragma once
// Building training programs: what turns a forward program with its
// backward part (nabla/backward.h) into one training step, and into the
// program that evaluates it. `nabla run`, `nabla exec --sgd`, the Python
// module and embedding programs build theirs here, so every one of them
// trains with the same ops. Unlike the core, this library names ops: those
// of the standard plugins (docs/ops.md), which must be loaded first.
//
//   ProgramDesc p = LoadProgram("model.yaml");
//   const ParamGrads pg = AppendBackward(p, "loss");
//   train::OptimizerOptions o;
//   o.type = "adam";
//   o.lr = 1e-3;
//   train::AppendOptimizer(p, pg, o);
//   // run BuildStartupProgram(p, feeds) once, then p once per batch;
//   // train::SetLearningRate(scope, lr) between steps follows a schedule.
//
// The loop, datasets, checkpoints and progress output stay with the caller.
#include <cstdint>
#include <string>

#include "nabla/backward.h"
#include "nabla/program.h"
#include "nabla/scope.h"

namespace nabla::train {

// Paddle's optimizers (sgd, momentum, adam, adamw) with its L2 regularizer and
// global-norm gradient clipping.
struct OptimizerOptions {
  std::string type = "sgd";  // sgd | momentum | adam | adamw
  double lr = 0.01;          // what the startup program puts in kLearningRateVar
  double momentum = 0.9;     // momentum: the velocity factor (Paddle's mu)
  bool nesterov = false;
  double beta1 = 0.9;  // adam, adamw
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;      // L2: grad += weight_decay * param; adamw: its decoupled decay (coeff)
  double clip_global_norm = 0.0;  // 0: no clipping
};

// The learning-rate var AppendOptimizer declares. '@' keeps the names this
// library adds (P@velocity, metric@correct, ...) apart from user names.
inline constexpr char kLearningRateVar[] = "optimizer@learning_rate";

// Appends the update of every (parameter, gradient) pair to the root block
// in Paddle's order: clip the raw gradients by their global norm, add the
// L2 term (not for adamw, whose op decays the parameter), then one sgd,
// momentum, adam or adamw op per parameter. Declares what
// those ops keep between steps as persistable vars the startup program
// fills: kLearningRateVar (dtype of the first parameter) and per parameter
// P@velocity, or P@moment1, P@moment2, P@beta1_pow, P@beta2_pow. Throws
// when `param_grads` is empty, a name is already taken, or an op is not loaded.
void AppendOptimizer(ProgramDesc& program, const ParamGrads& param_grads, const OptimizerOptions& options);

// The learning rate over time, computed on the host from the step and epoch
// alone, so a resumed run follows the same curve.
struct LrScheduleOptions {
  std::string type = "constant";  // constant | step | exponential | cosine
  double gamma = 0.1;             // step, exponential: the factor per period
  int64_t every_epochs = 1;       // step: the period
  double final_lr = 0.0;          // cosine: the rate at the last planned step
  int64_t warmup_steps = 0;       // linear ramp from lr/warmup_steps up to lr
};

// The rate for the step about to run: `step` steps done so far, in epoch
// `epoch` (from 0), of `planned_steps` in all (cosine needs it).
double ScheduledLearningRate(double lr, const LrScheduleOptions& schedule, int64_t step, int64_t epoch,
                             int64_t planned_steps);

// Writes `lr` into kLearningRateVar of `scope`, through its device (the var
// lives where the program runs, an OpenCL buffer included).
void SetLearningRate(Scope& scope, double lr);

// The vars AppendAccuracy adds: how many of the batch's rows have their
// label among the top k scores, of how many, and the ratio.
struct AccuracyVars {
  std::string correct;
  std::string total;
  std::string accuracy;
};

// Appends top_k over `scores` ([N, classes]) and accuracy against `label`
// ([N, 1] integers) to the root block.
AccuracyVars AppendAccuracy(ProgramDesc& program, const std::string& scores, const std::string& label, int k = 1);

// The scores a loss compares `label` with: the Logits (or X) input of the
// first root op that reads `label` through a Label slot; "" when none does.
std::string FindScoresFor(const BlockDesc& block, const std::string& label);

// What evaluation runs: `program`'s first `forward_ops` root ops (the forward
// part and its metrics, before backward and optimizer), with is_test set on
// every op that has the attribute. Count the ops before AppendBackward and
// call this before it too: the backward builder may insert ops into the
// forward part (copies of overwritten values, docs/backward.md). On a
// program with a backward part, a count that does not end where the loss's
// seed begins is an error rather than a program cut short.
ProgramDesc MakeEvalProgram(const ProgramDesc& program, size_t forward_ops);

// A persistable, no-gradient var the startup program fills with `value`:
// the optimizer state above, and other constants a pass adds (the
// data-parallel gradient scale).
VarDesc* DeclareFilledVar(BlockDesc& block, const std::string& name, const Shape& shape, DType dtype, float value);

}  // namespace nabla::train
