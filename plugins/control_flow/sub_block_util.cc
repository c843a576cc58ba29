#include "sub_block_util.h"

#include <algorithm>

#include "nabla/device.h"

namespace nabla::control_flow {

std::string ForwardNameOf(const std::string& grad_name) { return StripGradSuffix(grad_name); }

bool ReadScalarBool(const Tensor& t, const std::string& what) {
  NABLA_ENFORCE(t.GetDType() == DType::kBool && t.Numel() == 1 && t.IsInitialized(), kInvalidArgument, what,
                " must be a bool tensor with exactly one element, but received ", t.DebugString());
  return *t.Data<bool>();
}

namespace {
// Readers only: the destination shares the source's buffers.
void ShareVar(const Variable& src, Variable* dst) {
  dst->SetType(src.Type());
  if (src.Type() == VarType::kTensorArray) {
    const size_t n = ArraySize(src);
    ResizeArray(dst, n);
    for (size_t i = 0; i < n; ++i) AssignTensor(&ArrayEntry(*dst, i), ArrayEntry(src, i));
  } else {
    dst->GetTensor().ShareDataWith(src.GetTensor());
  }
}
}  // namespace

int SubBlockIdx(const OpDesc& op) {
  auto it = op.Attrs().find("sub_block");
  if (it == op.Attrs().end()) return -1;
  const BlockRef* ref = std::get_if<BlockRef>(&it->second);
  return ref ? ref->idx : -1;
}

namespace {

void CollectAccess(const ProgramDesc& program, const BlockDesc& block,
                   const std::function<bool(const std::string&)>& outer, NameSet* written, NameSet* read_seen,
                   NameSet* write_seen, BlockAccess* access) {
  for (const auto& op : block.AllOps()) {
    std::vector<std::string> reads = op->InputArgumentNames();
    int sub = SubBlockIdx(*op);
    if (sub >= 0 && static_cast<size_t>(sub) < program.Size() && sub != block.Idx()) {
      // A nested block runs at this op: what it reads first from outside is
      // read here (its own writes stay in `written` for the later ops).
      BlockAccess nested;
      NameSet nested_written = *written, nested_read_seen, nested_write_seen;
      CollectAccess(program, *program.Block(static_cast<size_t>(sub)), outer, &nested_written, &nested_read_seen,
                    &nested_write_seen, &nested);
      reads.insert(reads.end(), nested.reads.begin(), nested.reads.end());
      for (const auto& w : nested.writes)
        if (write_seen->insert(w).second) access->writes.push_back(w);
    }
    for (const auto& a : reads) {
      if (a == kEmptyVarName || written->count(a) || !outer(a)) continue;
      if (read_seen->insert(a).second) access->reads.push_back(a);
    }
    for (const auto& a : op->OutputArgumentNames()) {
      if (a == kEmptyVarName) continue;
      written->insert(a);
      if (outer(a) && write_seen->insert(a).second) access->writes.push_back(a);
    }
  }
}

}  // namespace

BlockAccess OuterAccess(const ProgramDesc& program, const BlockDesc& block,
                        const std::function<bool(const std::string&)>& outer) {
  BlockAccess access;
  NameSet written, read_seen, write_seen;
  CollectAccess(program, block, outer, &written, &read_seen, &write_seen, &access);
  return access;
}

void CheckSubBlockSlots(const OpDesc& op, const BlockDesc& block, const std::vector<std::string>& in_slots,
                        const std::string& out_slot) {
  const ProgramDesc& program = *block.Program();
  const BlockDesc* parent = block.Parent();
  if (parent == nullptr) return;
  auto outer = [&](const std::string& n) { return !block.HasVar(n) && parent->FindVarRecursive(n) != nullptr; };
  // Integer and bool vars never carry a gradient, so leaving them out loses
  // nothing; a float var (or one whose dtype is not known yet) must be listed.
  auto matters = [&](const std::string& n) {
    const VarDesc* v = parent->FindVarRecursive(n);
    return v == nullptr || v->Type() == VarType::kTensorArray || !v->HasDType() || IsFloating(v->GetDType());
  };
  BlockAccess access = OuterAccess(program, block, outer);
  NameSet listed_in;
  for (const auto& slot : in_slots)
    for (const auto& a : op.Input(slot)) listed_in.insert(a);
  NameSet listed_out(op.Output(out_slot).begin(), op.Output(out_slot).end());
  std::string where =
      StrCat(program.Where(op.Pos()).empty() ? "" : program.Where(op.Pos()) + ": ", "op '", op.Type(), "'");
  std::string missing_in, missing_out;
  for (const auto& r : access.reads)
    if (!listed_in.count(r) && matters(r)) missing_in += (missing_in.empty() ? "" : ", ") + r;
  for (const auto& w : access.writes)
    if (!listed_out.count(w) && matters(w)) missing_out += (missing_out.empty() ? "" : ", ") + w;
  std::string first_in = in_slots.empty() ? std::string("X") : in_slots.front();
  NABLA_ENFORCE(missing_in.empty(), kInvalidArgument, where, ": its sub_block ", block.Idx(),
                " reads outer vars that are not in input slot ", first_in,
                ": expected every outer float var the block "
                "reads to be listed (the backward pass only sees the slots), but these are missing: ",
                missing_in);
  NABLA_ENFORCE(missing_out.empty(), kInvalidArgument, where, ": its sub_block ", block.Idx(),
                " writes outer vars that are not in output slot ", out_slot,
                ": expected every outer float var the block writes to be listed (the backward pass only sees the "
                "slots), but these are missing: ",
                missing_out);
}

std::vector<std::string> CarriedNames(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  NameSet outs(outputs.begin(), outputs.end());
  std::vector<std::string> carried;
  NameSet seen;
  for (const auto& n : inputs)
    if (n != kEmptyVarName && outs.count(n) && seen.insert(n).second) carried.push_back(n);
  return carried;
}

Scope& RunForwardStep(const ExecutionContext& ctx, int block_idx, Scope& parent,
                      const std::vector<std::string>& carried, bool keep_inputs) {
  const RunContext* run = ctx.Run();
  NABLA_ENFORCE(run != nullptr && run->program != nullptr, kPreconditionNotMet, "op '", ctx.Op().Type(),
                "' runs a sub-block but was not started by an executor");
  const BlockDesc& block = *run->program->Block(static_cast<size_t>(block_idx));
  Device& device = ctx.GetDevice();
  // Values before the step, as deep copies: the step's kernels may reuse the
  // outer buffers in place.
  std::vector<std::shared_ptr<Variable>> saved(keep_inputs ? carried.size() : 0);
  for (size_t k = 0; k < saved.size(); ++k) {
    const Variable* v = parent.FindVar(carried[k]);
    if (v != nullptr && v->Type() == VarType::kDense && v->GetTensor().IsInitialized()) {
      saved[k] = NewVariable();
      saved[k]->GetTensor().CopyFrom(v->GetTensor(), device);
    }
  }
  Scope& step = parent.NewScope();
  for (const auto& var : block.AllVars()) {
    if (var->Persistable()) continue;
    step.Var(var->Name())->SetType(var->Type());
  }
  try {
    ctx.RunBlock(block_idx, step);
  } catch (...) {
    parent.DeleteScope(&step);
    throw;
  }
  for (size_t k = 0; k < saved.size(); ++k)
    if (saved[k]) AssignTensor(&step.Var(carried[k])->GetTensor(), saved[k]->GetTensor());
  return step;
}

GradBlockPlan PlanGradBlock(const ProgramDesc& program, int block_idx) {
  NABLA_ENFORCE(block_idx >= 0 && static_cast<size_t>(block_idx) < program.Size(), kOutOfRange, "grad sub_block ",
                block_idx, " is not a block of the program (it has ", program.Size(), " blocks)");
  GradBlockPlan plan;
  plan.block_idx = block_idx;
  NameSet read_seen;
  for (const auto& op : program.Block(static_cast<size_t>(block_idx))->AllOps()) {
    for (const auto& a : op->InputArgumentNames())
      if (a != kEmptyVarName && a.find(kGradSuffix) != std::string::npos && !plan.written.count(a) &&
          read_seen.insert(a).second)
        plan.read_first.push_back(a);
    for (const auto& a : op->OutputArgumentNames())
      if (a != kEmptyVarName) plan.written.insert(a);
  }
  return plan;
}

void RunGradStep(const ExecutionContext& ctx, const GradBlockPlan& plan, Scope& step, Scope& outer,
                 const std::vector<OutputGradSource>& og) {
  Device& device = ctx.GetDevice();
  for (const auto& s : og) {
    const std::string& name = s.name;
    const Variable* src = s.src;
    Variable* dst = step.Var(name);
    if (src == nullptr || src == dst || !HasValue(*src)) continue;
    // A gradient the block only reads can share the outer buffers; one it
    // also writes (a carried var) gets its own copy.
    if (plan.written.count(name)) {
      CopyVar(*src, dst, device);
    } else {
      ShareVar(*src, dst);
    }
  }
  for (const auto& name : plan.written)
    if (step.FindLocalVar(name) == nullptr) step.Var(name);
  for (const auto& name : plan.read_first) {
    Variable* v = step.FindVar(name);
    if (v != nullptr && HasValue(*v)) continue;
    const Variable* fwd = step.FindVar(ForwardNameOf(name));
    if (fwd != nullptr && HasValue(*fwd)) ZeroVarLike(*fwd, v != nullptr ? v : step.Var(name), device);
  }
  ctx.RunBlock(plan.block_idx, step);
}

std::vector<InputGradSlot> InputGradSlots(const ExecutionContext& ctx, const GradBlockPlan& plan,
                                          const std::string& fwd_slot, const std::string& grad_slot,
                                          const std::string& out_slot) {
  const std::vector<std::string>& fwd = ctx.Op().Input(fwd_slot);
  const std::vector<std::string>& grads = ctx.Op().Output(grad_slot);
  const std::vector<std::string>& outs = ctx.Op().Input(out_slot);
  NameSet out_set(outs.begin(), outs.end());
  std::vector<InputGradSlot> slots;
  for (size_t j = 0; j < grads.size() && j < fwd.size(); ++j) {
    if (grads[j] == kEmptyVarName) continue;
    std::string inner = GradVarName(fwd[j]);
    bool written = plan.written.count(inner) != 0;
    slots.push_back(
        InputGradSlot{fwd[j], grads[j], inner, out_set.count(fwd[j]) != 0, written, ctx.OutputVar(grad_slot, j)});
  }
  return slots;
}

std::vector<OutputGradSource> OutputGradSources(const ExecutionContext& ctx, const std::vector<InputGradSlot>& slots,
                                                const std::string& out_slot) {
  const std::string grad_slot = out_slot + kGradSuffix;
  const std::vector<std::string>& outs = ctx.Op().Input(out_slot);
  const std::vector<std::string>& ogs = ctx.Op().Input(grad_slot);
  const std::vector<std::string>& overwritten = ctx.Op().Output(grad_slot);
  std::vector<OutputGradSource> sources;
  for (size_t i = 0; i < ogs.size() && i < outs.size(); ++i) {
    if (ogs[i] == kEmptyVarName) continue;
    Variable* v = ctx.GetScope().FindVar(ogs[i]);
    OutputGradSource src;
    src.name = GradVarName(outs[i]);
    src.src = v;
    src.fwd = outs[i];
    const InputGradSlot* carried = nullptr;
    for (const auto& s : slots)
      if (s.carried && s.fwd == outs[i]) carried = &s;
    if (carried != nullptr) {
      if (v != carried->outer && v != nullptr && HasValue(*v)) CopyVar(*v, carried->outer, ctx.GetDevice());
      src.src = carried->outer;
    } else if (i < overwritten.size() && overwritten[i] != kEmptyVarName) {
      src.overwritten = ctx.OutputVar(grad_slot, i);
      src.running = NewVariable();
      if (v != nullptr && HasValue(*v)) CopyVar(*v, src.running.get(), ctx.GetDevice());
      src.src = src.running.get();
    }
    sources.push_back(std::move(src));
  }
  return sources;
}

void AfterStep(std::vector<OutputGradSource>& og, Scope& step, Device& device) {
  for (auto& s : og) {
    if (!s.running) continue;
    // The step before did not leave its value to anything the loss reads.
    if (const Variable* fwd = step.FindVar(s.fwd); fwd != nullptr && HasValue(*fwd))
      ZeroVarLike(*fwd, s.running.get(), device);
  }
}

void FinishOverwritten(const std::vector<OutputGradSource>& og, bool any_step, Scope& scope, Device& device) {
  for (const auto& s : og) {
    if (s.overwritten == nullptr) continue;
    if (any_step) {
      if (const Variable* fwd = scope.FindVar(s.fwd); fwd != nullptr && HasValue(*fwd))
        ZeroVarLike(*fwd, s.overwritten, device);
    } else if (s.src != nullptr && s.src != s.overwritten) {
      // Nothing ran: the value before the op is the value after it.
      CopyVar(*s.src, s.overwritten, device);
    }
  }
}

void CollectStepGrads(const std::vector<InputGradSlot>& slots, Scope& step, Device& device, const std::string& where) {
  for (const auto& s : slots) {
    Variable* inner = s.written ? step.FindLocalVar(s.inner) : nullptr;
    if (s.carried) {
      if (inner != nullptr && HasValue(*inner)) {
        CopyVar(*inner, s.outer, device);
      } else if (const Variable* fwd = step.FindVar(s.fwd); fwd != nullptr && HasValue(*fwd)) {
        // The step overwrote the var without reading it: the value before
        // the step does not reach anything after it.
        ZeroVarLike(*fwd, s.outer, device);
      }
    } else if (inner != nullptr && HasValue(*inner)) {
      AccumulateVar(s.outer, *inner, device, StrCat("'", s.grad, "' in ", where));
    }
  }
}

std::vector<std::unique_ptr<OpDesc>> MakeSubBlockGradOp(const OpDesc& fwd, const BlockDesc* grad_block,
                                                        const std::vector<std::string>& in_slots,
                                                        const std::string& grad_in_slot, const std::string& out_slot,
                                                        const std::string& scope_slot,
                                                        const std::vector<std::string>& input_grads,
                                                        const std::vector<std::string>& output_grads) {
  std::vector<std::unique_ptr<OpDesc>> ops;
  NABLA_ENFORCE(grad_block != nullptr, kPreconditionNotMet, "op '", fwd.Type(),
                "': the backward builder gave no grad block for its sub_block");
  GradBlockPlan plan = PlanGradBlock(*grad_block->Program(), grad_block->Idx());
  NameSet read_first(plan.read_first.begin(), plan.read_first.end());
  const std::vector<std::string>& xs = fwd.Input(grad_in_slot);
  const std::vector<std::string>& outs = fwd.Output(out_slot);
  NameSet out_set(outs.begin(), outs.end());

  std::vector<std::string> x_grads(xs.size(), kEmptyVarName);
  NameSet carried_with_grad;
  bool any = false;
  for (size_t j = 0; j < xs.size() && j < input_grads.size(); ++j) {
    const std::string& g = input_grads[j];
    if (g == kEmptyVarName) continue;
    bool carried = out_set.count(xs[j]) != 0;
    if (carried) carried_with_grad.insert(xs[j]);
    if (carried || plan.written.count(g)) {
      x_grads[j] = g;
      any = true;
    }
  }
  std::vector<std::string> out_grads(outs.size(), kEmptyVarName);
  std::vector<std::string> overwritten(outs.size(), kEmptyVarName);
  NameSet x_set(xs.begin(), xs.end());
  bool any_overwritten = false;
  for (size_t i = 0; i < outs.size() && i < output_grads.size(); ++i) {
    const std::string& g = output_grads[i];
    if (g == kEmptyVarName) continue;
    if (carried_with_grad.count(outs[i]) || read_first.count(g)) out_grads[i] = g;
    // A dense float output the block writes without reading: the gradient of
    // its value before the op is cut (written in place on its gradient).
    const VarDesc* v = grad_block->FindVarRecursive(outs[i]);
    if (!x_set.count(outs[i]) && v != nullptr && v->Type() == VarType::kDense && v->HasDType() &&
        IsFloating(v->GetDType()) && !v->StopGradient()) {
      out_grads[i] = g;
      overwritten[i] = g;
      any_overwritten = true;
    }
  }

  if (!any && !any_overwritten) return ops;
  auto op = std::make_unique<OpDesc>();
  op->SetType(fwd.Type() + "_grad");
  for (const auto& slot : in_slots) op->SetInput(slot, fwd.Input(slot));
  op->SetInput(out_slot, outs);
  op->SetInput(out_slot + kGradSuffix, out_grads);
  op->SetInput(scope_slot, fwd.Output(scope_slot));
  op->SetOutput(grad_in_slot + kGradSuffix, x_grads);
  if (any_overwritten) op->SetOutput(out_slot + kGradSuffix, overwritten);
  op->MutableAttrs() = fwd.Attrs();
  op->SetAttr("sub_block", BlockRef{grad_block->Idx()});
  ops.push_back(std::move(op));
  return ops;
}

void CheckCondition(InferShapeContext& c, const std::string& slot) {
  if (!c.HasInput(slot)) return;
  DType d = c.InputDType(slot);
  Shape s = c.InputShape(slot);
  NABLA_ENFORCE(d == DType::kBool, kInvalidArgument, c.Where(), ": ", slot,
                " must be a bool tensor with exactly one element, but received dtype ", DTypeName(d));
  NABLA_ENFORCE(NumElements(s) < 0 || NumElements(s) == 1, kInvalidArgument, c.Where(), ": ", slot,
                " must be a bool tensor with exactly one element, but received shape ", ShapeToString(s));
}

void InferGradVarTypes(const OpDesc& op, BlockDesc& block, const std::string& fwd_slot) {
  const auto& xs = op.Input(fwd_slot);
  const auto& gs = op.Output(fwd_slot + kGradSuffix);
  for (size_t j = 0; j < gs.size() && j < xs.size(); ++j) {
    if (gs[j] == kEmptyVarName) continue;
    const VarDesc* x = block.FindVarRecursive(xs[j]);
    VarDesc* g = block.FindVarRecursive(gs[j]);
    if (x != nullptr && g != nullptr) g->SetType(x->Type());
  }
}

void InferGradShapes(InferShapeContext& c, const std::string& fwd_slot) {
  const std::string grad_slot = fwd_slot + kGradSuffix;
  const auto& gs = c.Op().Output(grad_slot);
  for (size_t j = 0; j < gs.size(); ++j)
    if (gs[j] != kEmptyVarName) c.ShareShapeAndDType(fwd_slot, grad_slot, j, j);
}

}  // namespace nabla::control_flow
