// Metric ops and the evaluation program.
#include <algorithm>

#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/train.h"
#include "op_builder.h"

namespace nabla::train {

AccuracyVars AppendAccuracy(ProgramDesc& program, const std::string& scores, const std::string& label, int k) {
  NABLA_ENFORCE(k >= 1, kInvalidArgument, "the accuracy metric's k must be at least 1, but received ", k);
  const BlockDesc& block = *program.Root();
  NABLA_ENFORCE(block.FindVarRecursive(scores) != nullptr, kNotFound, "the accuracy metric ranks '", scores,
                "', which is not a var of the program");
  NABLA_ENFORCE(block.FindVar(label) != nullptr, kNotFound, "the accuracy metric reads the label '", label,
                "', which is not a var of the program's root block");
  const std::string values = "metric@top_k", indices = "metric@top_k_indices";
  AccuracyVars vars{"metric@correct", "metric@total", "metric@accuracy"};
  OpBuilder b(program);
  b.Append("top_k", {{"X", {scores}}}, {{"Out", {values}}, {"Indices", {indices}}}, {{"k", k}});
  b.Append("accuracy", {{"Out", {values}}, {"Indices", {indices}}, {"Label", {label}}},
           {{"Accuracy", {vars.accuracy}}, {"Correct", {vars.correct}}, {"Total", {vars.total}}});
  return vars;
}

std::string FindScoresFor(const BlockDesc& block, const std::string& label) {
  for (const auto& op : block.AllOps()) {
    const auto& l = op->Input("Label");
    if (std::find(l.begin(), l.end(), label) == l.end()) continue;
    if (op->HasInput("Logits")) return op->Input("Logits").at(0);
    if (op->HasInput("X")) return op->Input("X").at(0);
  }
  return "";
}

ProgramDesc MakeEvalProgram(const ProgramDesc& program, size_t forward_ops) {
  ProgramDesc eval = program;
  BlockDesc* block = eval.Root();
  NABLA_ENFORCE(forward_ops <= block->OpSize(), kOutOfRange, "the forward part has ", forward_ops,
                " ops, but the program's root block only ", block->OpSize());
  if (const auto& bw = program.Backward(); bw.has_value() && forward_ops < block->OpSize()) {
    const auto outs = block->Op(forward_ops)->OutputArgumentNames();
    NABLA_ENFORCE(std::find(outs.begin(), outs.end(), GradVarName(bw->loss)) != outs.end(), kInvalidArgument,
                  "the eval program keeps the first ", forward_ops, " root ops, but op ", forward_ops, " ('",
                  block->Op(forward_ops)->Type(), "') is not the seed of '", GradVarName(bw->loss),
                  "' that starts the backward part: count the forward ops before AppendBackward, which may insert "
                  "ops into them");
  }
  block->RemoveOps(forward_ops, block->OpSize());
  const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  for (const auto& op : block->AllOps()) {
    if (registry->Get(op->Type()).schema.FindAttr("is_test") != nullptr) op->SetAttr("is_test", true);
  }
  eval.SetBackward(std::nullopt);
  return eval;
}

}  // namespace nabla::train
