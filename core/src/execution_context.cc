#include <optional>

#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "prepared_op.h"

namespace nabla {

ExecutionContext::ExecutionContext(const OpDesc& op, Scope& scope, Device& device, const RunContext* run)
    : op_(op), scope_(scope), device_(device), run_(run) {}

ExecutionContext::ExecutionContext(const PreparedOp& prepared, Scope& scope, Device& device, const RunContext* run)
    : op_(*prepared.op), scope_(scope), device_(device), run_(run), prepared_(&prepared) {}

namespace {
bool Present(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a != kEmptyVarName) return true;
  return false;
}
}  // namespace

const Attribute* ExecutionContext::PreparedAttr(std::string_view name) const {
  return prepared_ ? prepared_->FindAttr(name) : nullptr;
}

const Attribute* ExecutionContext::FindAttr(std::string_view name) const {
  if (prepared_ && prepared_->attrs) return prepared_->FindAttr(name);  // copies of all of the op's
  for (const auto& [key, value] : op_.Attrs())
    if (PreparedOp::SameName(key, name)) return &value;
  return nullptr;
}

namespace {
// Whether a prepared op's slot has an argument: false for a slot the op
// lacks (the prepared slots are its desc's), true for a resolved var, and
// unknown (nullopt) where only the desc can tell an @EMPTY@ argument from a
// var that did not exist when the block was prepared.
std::optional<bool> PreparedPresence(const PreparedOp* p, bool input, const std::string& slot) {
  if (!p) return std::nullopt;
  const PreparedSlot* s = PreparedOp::Find(input ? p->inputs : p->outputs, slot);
  if (!s) return false;
  for (const Variable* v : s->vars)
    if (v) return true;
  return std::nullopt;
}
}  // namespace

bool ExecutionContext::HasInput(const std::string& slot) const {
  if (auto known = PreparedPresence(prepared_, true, slot)) return *known;
  return Present(op_.Input(slot));
}
bool ExecutionContext::HasOutput(const std::string& slot) const {
  if (auto known = PreparedPresence(prepared_, false, slot)) return *known;
  return Present(op_.Output(slot));
}
// A prepared slot holds one entry per argument (null for @EMPTY@), and the
// prepared slots are all of the desc's: no walk of the desc's slot map.
size_t ExecutionContext::InputSize(const std::string& slot) const {
  if (prepared_) {
    const PreparedSlot* s = PreparedOp::Find(prepared_->inputs, slot);
    return s ? s->vars.size() : 0;
  }
  return op_.Input(slot).size();
}
size_t ExecutionContext::OutputSize(const std::string& slot) const {
  if (prepared_) {
    const PreparedSlot* s = PreparedOp::Find(prepared_->outputs, slot);
    return s ? s->vars.size() : 0;
  }
  return op_.Output(slot).size();
}

namespace {
// The var the block's preparation resolved for slot[i], if any. A prepared
// var stands for a real argument (an @EMPTY@ one is null), so kernels that
// find one skip the OpDesc's slot map and the scope: those lookups by name
// were several percent of a step of small ops.
Variable* Prepared(const PreparedOp* p, bool input, const std::string& slot, size_t i) {
  if (!p) return nullptr;
  const PreparedSlot* s = PreparedOp::Find(input ? p->inputs : p->outputs, slot);
  return s && i < s->vars.size() ? s->vars[i] : nullptr;
}
}  // namespace

Variable* ExecutionContext::InputVar(const std::string& slot, size_t i) const {
  if (Variable* v = Prepared(prepared_, true, slot, i)) return v;
  const auto& args = op_.Input(slot);
  NABLA_ENFORCE(i < args.size() && args[i] != kEmptyVarName, kNotFound, "op '", op_.Type(), "' has no input ", slot,
                "[", i, "]");
  Variable* v = scope_.FindVar(args[i]);
  NABLA_ENFORCE(v != nullptr, kNotFound, "op '", op_.Type(), "' reads ", slot, "[", i, "] = '", args[i],
                "' but no such variable exists at run time (was it fed or initialized?)");
  return v;
}

Variable* ExecutionContext::OutputVar(const std::string& slot, size_t i) const {
  if (Variable* v = Prepared(prepared_, false, slot, i)) return v;
  if (PreparedPresence(prepared_, false, slot) == std::optional<bool>(false)) return nullptr;  // no such slot
  const auto& args = op_.Output(slot);
  if (i >= args.size() || args[i] == kEmptyVarName) return nullptr;
  Variable* v = scope_.FindVar(args[i]);
  return v ? v : scope_.Var(args[i]);
}

const Tensor& ExecutionContext::Input(const std::string& slot, size_t i) const {
  const Tensor& t = InputVar(slot, i)->GetTensor();
  NABLA_ENFORCE(t.IsInitialized(), kPreconditionNotMet, "op '", op_.Type(), "' reads ", slot, "[", i, "] = '",
                op_.Input(slot)[i], "' before anything wrote it");
  return t;
}

Tensor* ExecutionContext::Output(const std::string& slot, size_t i) const {
  Variable* v = OutputVar(slot, i);
  return v ? &v->GetTensor() : nullptr;
}

std::vector<const Tensor*> ExecutionContext::MultiInput(const std::string& slot) const {
  std::vector<const Tensor*> out;
  const auto& args = op_.Input(slot);
  for (size_t i = 0; i < args.size(); ++i) out.push_back(args[i] == kEmptyVarName ? nullptr : &Input(slot, i));
  return out;
}

Tensor ExecutionContext::InputHostTensor(const std::string& slot, size_t i) const { return HostCopy(Input(slot, i)); }

std::vector<Tensor*> ExecutionContext::MultiOutput(const std::string& slot) const {
  std::vector<Tensor*> out;
  for (size_t i = 0; i < op_.Output(slot).size(); ++i) out.push_back(Output(slot, i));
  return out;
}

void ExecutionContext::RunBlock(int block_idx, Scope& scope) const {
  NABLA_ENFORCE(run_ && run_->executor && run_->program, kPreconditionNotMet, "op '", op_.Type(),
                "' runs a sub-block but was not started by an executor");
  // The sub-block draws as its parent run does (the step's index), not as a
  // run of its own.
  RunOptions options;
  options.random_index = run_->run_index;
  options.random_stream = run_->random_stream;
  run_->executor->Run(*run_->program, block_idx, scope, options);
}

uint64_t ExecutionContext::Seed() const {
  if (op_.HasAttr("seed")) {
    if (const int* s = std::get_if<int>(&op_.GetAttr("seed")); s && *s != 0) return static_cast<uint64_t>(*s);
  }
  // Derive a seed from the run's base seed, the op's outputs and the run
  // index (the training step where the trainer runs it; RunOptions):
  // reproducible across processes and resumes, different from step to step.
  // A data-parallel rank's stream makes its draws its own.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t x) { h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(run_ && run_->options ? run_->options->seed : 0);
  mix(run_ ? run_->run_index : 0);
  if (run_ && run_->random_stream != 0) mix(run_->random_stream);
  for (const auto& name : op_.OutputArgumentNames())
    for (char c : name) mix(static_cast<unsigned char>(c));
  return h;
}

}  // namespace nabla
