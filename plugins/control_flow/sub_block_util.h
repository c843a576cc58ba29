#pragma once
// Private helpers of the control_flow op files that own a sub-block: the
// machinery they share (running one step in a
// child scope, running a grad block in a saved step scope, finding which
// outer gradients a grad block reads). Copies and accumulation of variables
// are in var_util.h, the tensor-level helpers in control_flow_util.h.
// Nothing here is part of nabla's API.
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "control_flow_util.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/opkit.h"
#include "nabla/program.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/types.h"
#include "var_util.h"

namespace nabla::control_flow {

using NameSet = std::unordered_set<std::string>;

// "x@GRAD" -> "x", "x@GRAD@RENAME@1" -> "x".
std::string ForwardNameOf(const std::string& grad_name);

// The element of a one-element bool tensor; anything else is an error naming
// `what` (e.g. "op 'while': Condition 'cond'").
bool ReadScalarBool(const Tensor& t, const std::string& what);

// Names an op's block attribute points to (the `sub_block` of a control-flow
// op); -1 when it has none.
int SubBlockIdx(const OpDesc& op);

// What a block's ops (and, recursively, the blocks they own) read from and
// write to vars that are not local to the block: `outer` decides which names
// are outside. Reads are the names read before any op of the block wrote
// them.
struct BlockAccess {
  std::vector<std::string> reads;   // in first-read order
  std::vector<std::string> writes;  // in first-write order
};
BlockAccess OuterAccess(const ProgramDesc& program, const BlockDesc& block,
                        const std::function<bool(const std::string&)>& outer);

// Build-time check that a sub-block op lists in `in_slots` every outer var its
// block reads and in `out_slot` every outer var it writes; the message names
// the missing vars, the op and the slot. The backward builder and the task
// graph only see these slots, so a missing name would silently lose a
// gradient or a dependency.
void CheckSubBlockSlots(const OpDesc& op, const BlockDesc& block, const std::vector<std::string>& in_slots,
                        const std::string& out_slot);

// Dense vars that are both an input and an output of the op: the loop- or
// branch-carried vars whose value before the step the gradient needs.
std::vector<std::string> CarriedNames(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs);

// Runs block `block_idx` once in a new child scope of `parent` and returns
// it. Vars the block declares are local to the step. With `keep_inputs`, the
// value every carried var held before the step is kept in the step scope
// under its own name, so grad ops running there read the value the forward
// ops read.
Scope& RunForwardStep(const ExecutionContext& ctx, int block_idx, Scope& parent,
                      const std::vector<std::string>& carried, bool keep_inputs);

// The grad block of a sub-block op, analysed once per run.
struct GradBlockPlan {
  int block_idx = -1;
  NameSet written;                      // every output of its ops
  std::vector<std::string> read_first;  // gradient names read before written
};
GradBlockPlan PlanGradBlock(const ProgramDesc& program, int block_idx);

// One gradient output of a sub-block grad op.
struct InputGradSlot {
  std::string fwd;    // the forward input
  std::string grad;   // its gradient var outside (the backward builder may have renamed it)
  std::string inner;  // the gradient the grad block writes: GradVarName(fwd)
  bool carried;       // also an output of the forward op
  bool written;       // the grad block writes `grad`
  Variable* outer;    // the op's output var (non-owning)
};
// The X@GRAD-style outputs of a sub-block grad op whose forward inputs are
// `fwd_slot` and gradients `grad_slot`.
std::vector<InputGradSlot> InputGradSlots(const ExecutionContext& ctx, const GradBlockPlan& plan,
                                          const std::string& fwd_slot, const std::string& grad_slot,
                                          const std::string& out_slot);
// Where each outer gradient a grad block reads comes from: the var named in
// Out@GRAD, except for a carried var, whose running gradient lives in its
// X@GRAD output (the backward builder may have renamed that output apart from
// Out@GRAD; the final gradient is copied into it first).
//
// An output the op overwrites without reading it first (a dense float Out
// var not in X, listed in the grad op's Out@GRAD output) gets its gradient
// only in the last step that ran: `running` holds that gradient and is zeroed
// after each step (AfterStep), and the gradient of its value before the op
// is zero once any step ran (FinishOverwritten).
struct OutputGradSource {
  std::string name;                 // the name the grad block reads: GradVarName(fwd), whatever the outer var is called
  Variable* src;                    // non-owning; null when absent
  std::string fwd;                  // the forward output
  Variable* overwritten = nullptr;  // non-owning: the Out@GRAD output var, for overwritten outputs
  std::shared_ptr<Variable> running;  // the step's gradient of an overwritten output
};
std::vector<OutputGradSource> OutputGradSources(const ExecutionContext& ctx, const std::vector<InputGradSlot>& slots,
                                                const std::string& out_slot);
void AfterStep(std::vector<OutputGradSource>& og, Scope& step, Device& device);
void FinishOverwritten(const std::vector<OutputGradSource>& og, bool any_step, Scope& scope, Device& device);

// Runs the grad block in `step` (a scope the forward step kept): each outer
// gradient in `og` is copied in as a local var, every var the grad block
// writes is made local (so nothing leaks into the outer scope), and a
// gradient the block reads that exists nowhere becomes zeros shaped like its
// forward var.
void RunGradStep(const ExecutionContext& ctx, const GradBlockPlan& plan, Scope& step, Scope& outer,
                 const std::vector<OutputGradSource>& og);

// Folds one step's inner gradients into the outer ones: a carried var's
// gradient is replaced (it is the gradient of the value before the step,
// which is what the previous step produced), any other is accumulated.
void CollectStepGrads(const std::vector<InputGradSlot>& slots, Scope& step, Device& device, const std::string& where);

// The maker shared by while and conditional_block: one `<type>_grad` op whose
// inputs are the forward inputs and outputs, the gradients of the forward
// outputs that the grad block reads (or that carry a var), the saved scopes;
// its outputs are the gradients of the forward inputs the grad block writes
// (or that carry a var).
std::vector<std::unique_ptr<OpDesc>> MakeSubBlockGradOp(const OpDesc& fwd, const BlockDesc* grad_block,
                                                        const std::vector<std::string>& in_slots,
                                                        const std::string& grad_in_slot, const std::string& out_slot,
                                                        const std::string& scope_slot,
                                                        const std::vector<std::string>& input_grads,
                                                        const std::vector<std::string>& output_grads);

// Build-time check of a condition slot: bool, one element (unknown dims pass).
void CheckCondition(InferShapeContext& c, const std::string& slot);
// Build-time inference of a sub-block grad op: `slot`@GRAD[j] takes the var
// type, shape and dtype of `slot`[j].
void InferGradVarTypes(const OpDesc& op, BlockDesc& block, const std::string& fwd_slot);
void InferGradShapes(InferShapeContext& c, const std::string& fwd_slot);

}  // namespace nabla::control_flow
