#include "nabla/executor.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "checked_internal.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "plugin_call.h"
#include "prepared_op.h"

namespace nabla {

Executor::~Executor() = default;

namespace {

bool Present(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a != kEmptyVarName) return true;
  return false;
}

// Finds an op's variables: through a PreparedOp when there is one (no name
// lookups), else by name in the scope.
class VarAccess {
 public:
  VarAccess(const OpDesc& op, Scope& scope, const PreparedOp* prepared) : op_(op), scope_(scope), prepared_(prepared) {}

  Variable& In(const std::string& slot, size_t i) const {
    const auto& args = op_.Input(slot);
    NABLA_ENFORCE(i < args.size() && args[i] != kEmptyVarName, kNotFound, "op '", op_.Type(), "' has no input ", slot,
                  "[", i, "]");
    Variable* v = Lookup(true, slot, i, args[i]);
    NABLA_ENFORCE(v != nullptr, kNotFound, "op '", op_.Type(), "' reads '", args[i],
                  "' but no such variable exists at run time (was it fed or initialized?)");
    return *v;
  }
  Variable* InOrNull(const std::string& slot, size_t i) const {
    const auto& args = op_.Input(slot);
    return i < args.size() && args[i] != kEmptyVarName ? Lookup(true, slot, i, args[i]) : nullptr;
  }
  Variable* Out(const std::string& slot, size_t i) const {
    const auto& args = op_.Output(slot);
    if (i >= args.size() || args[i] == kEmptyVarName) return nullptr;
    Variable* v = Lookup(false, slot, i, args[i]);
    return v ? v : scope_.Var(args[i]);
  }
  Variable* FirstDenseInput(const OpSchema& schema) const {
    auto usable = [](Variable* v) { return v && v->Type() == VarType::kDense && v->GetTensor().IsInitialized(); };
    for (const auto& slot : schema.inputs) {
      // The prepared vars, without the name lookups below (every dispatch
      // picks its kernel's dtype here); a slot with an unresolved var takes
      // the lookup path, which finds vars created since.
      if (const PreparedSlot* s = prepared_ ? PreparedOp::Find(prepared_->inputs, slot.name) : nullptr) {
        bool resolved = true;
        for (size_t i = 0; i < s->vars.size() && resolved; ++i) {
          if (usable(s->vars[i])) return s->vars[i];
          resolved = s->vars[i] != nullptr;
        }
        if (resolved) continue;
      }
      const auto& args = op_.Input(slot.name);
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == kEmptyVarName) continue;
        Variable* v = Lookup(true, slot.name, i, args[i]);
        if (usable(v)) return v;
      }
    }
    return nullptr;
  }

 private:
  Variable* Lookup(bool input, const std::string& slot, size_t i, const std::string& name) const {
    if (prepared_) {
      const PreparedSlot* s = PreparedOp::Find(input ? prepared_->inputs : prepared_->outputs, slot);
      if (s && i < s->vars.size() && s->vars[i]) return s->vars[i];
    }
    return scope_.FindVar(name);
  }

  const OpDesc& op_;
  Scope& scope_;
  const PreparedOp* prepared_;
};

// What run-time inference set an output to (checked mode compares the
// kernel's result with it).
struct InferredOutput {
  std::string slot;
  size_t i = 0;
  bool has_shape = false, has_dtype = false;
  Shape shape;
  DType dtype = DType::kFloat32;
};

// Shape inference over the tensors of a scope, right before the kernel runs.
class RuntimeInferShapeContext final : public InferShapeContext {
 public:
  // `program` (may be null) puts the file into Where(), as at build time;
  // `record` (checked mode, else null) gets every output it sets.
  RuntimeInferShapeContext(const OpDesc& op, const VarAccess& vars, const ProgramDesc* program,
                           std::vector<InferredOutput>* record = nullptr)
      : op_(op), vars_(vars), program_(program), record_(record) {}
  const OpDesc& Op() const override { return op_; }
  const ProgramDesc* Program() const override { return program_; }
  bool IsRuntime() const override { return true; }
  bool HasInput(const std::string& slot) const override { return Present(op_.Input(slot)); }
  bool HasOutput(const std::string& slot) const override { return Present(op_.Output(slot)); }
  size_t InputSize(const std::string& slot) const override { return op_.Input(slot).size(); }
  size_t OutputSize(const std::string& slot) const override { return op_.Output(slot).size(); }
  Shape InputShape(const std::string& slot, size_t i) const override {
    return vars_.In(slot, i).GetTensor().GetShape();
  }
  DType InputDType(const std::string& slot, size_t i) const override {
    return vars_.In(slot, i).GetTensor().GetDType();
  }
  VarType InputVarType(const std::string& slot, size_t i) const override { return vars_.In(slot, i).Type(); }
  void SetOutputShape(const std::string& slot, const Shape& shape, size_t i) override {
    Variable* v = vars_.Out(slot, i);
    if (!v) return;
    v->GetTensor().Resize(shape);
    if (record_) {
      InferredOutput& r = Record(slot, i);
      r.has_shape = true;
      r.shape = shape;
    }
  }
  void SetOutputDType(const std::string& slot, DType dtype, size_t i) override {
    Variable* v = vars_.Out(slot, i);
    if (!v) return;
    v->GetTensor().SetDType(dtype);
    if (record_) {
      InferredOutput& r = Record(slot, i);
      r.has_dtype = true;
      r.dtype = dtype;
    }
  }
  Tensor InputHostTensor(const std::string& slot, size_t i) const override {
    read_values_ = true;
    const Tensor& t = vars_.In(slot, i).GetTensor();
    NABLA_ENFORCE(t.IsInitialized(), kPreconditionNotMet, Where(), ": reads the values of input ", slot, "[", i,
                  "] = '", op_.Input(slot)[i], "' before anything wrote it");
    return HostCopy(t);
  }
  // Whether the shapes depend on input values: then the next run must infer
  // again even where every shape looks as before.
  bool ReadValues() const { return read_values_; }

 private:
  InferredOutput& Record(const std::string& slot, size_t i) {
    for (InferredOutput& r : *record_)
      if (r.slot == slot && r.i == i) return r;
    record_->emplace_back();
    record_->back().slot = slot;
    record_->back().i = i;
    return record_->back();
  }

  const OpDesc& op_;
  const VarAccess& vars_;
  const ProgramDesc* program_;
  mutable bool read_values_ = false;
  std::vector<InferredOutput>* record_;
};

std::string Where(const OpDesc& op, const RunContext& run) {
  std::string s = StrCat("op '", op.Type(), "'");
  if (run.program) {
    std::string w = run.program->Where(op.Pos());
    if (!w.empty()) s = w + ": " + s;
  }
  return s;
}

[[noreturn]] void ThrowNoKernel(const OpRegistry& registry, const OpDesc& op, Device& device, DType dtype) {
  std::string have;
  for (const auto& [d, t] : registry.KernelsOf(op.Type()))
    have += StrCat(have.empty() ? "" : ", ", DeviceTypeName(d), "/", DTypeName(t));
  // A device that runs no CPU kernels on host copies says so: the CPU
  // kernel listed is no use there.
  const bool cpu_only_elsewhere = device.Type() != DeviceType::kCPU && !HostFallback(device.Type());
  NABLA_THROW(kUnimplemented, "no kernel for (", DeviceTypeName(device.Type()), ", ", DTypeName(dtype),
              "); registered kernels: ", have.empty() ? "none" : have,
              cpu_only_elsewhere ? StrCat(" (device ", device.Name(), " runs no cpu kernels on host copies)") : "");
}

// An op with no kernel for an accelerator but one for the CPU runs there,
// with explicit copies, announced once per (op, device type, dtype) on
// stderr. Its inputs (and tensor-array outputs, which ops append to) are
// copied to the host into a child scope that shadows them, and the CPU
// kernel runs on the host device. Each output goes back to `device` when
// its var already lived there, or always for an eager call
// (RunContext::outputs_on_device: its result must be on its device, where
// the next call checks it); in a program a var that was empty or on the
// host keeps the host result, so chains of CPU-only ops (a loop condition
// computed by less_than and read by while) stay on the host, and device
// kernels upload what they read from it.
// Control-flow ops run sub-blocks in scopes they create under `scope`, so
// they cannot live in a throw-away child: their inputs (every outer var
// their blocks read) move to the host in place instead, and their blocks run
// on the host too, through an executor of the same kind: their CPU kernels
// read what the blocks write (a loop condition, step gradients).
void RunOnHost(const OpDesc& op, const OpInfo& info, const KernelInfo& kernel, Scope& scope, Device& device,
               const RunContext& run, DType dtype) {
  {
    static std::mutex mutex;
    static std::set<std::string> announced;
    std::lock_guard<std::mutex> lock(mutex);
    if (announced.insert(StrCat(op.Type(), "/", DeviceTypeName(device.Type()), "/", DTypeName(dtype))).second)
      std::cerr << "nabla: note: op '" << op.Type() << "' has no " << DeviceTypeName(device.Type()) << " kernel for "
                << DTypeName(dtype) << "; running its cpu kernel on host copies (said once)\n";
  }
  Device& host = HostDevice();
  auto to_host = [&host](const Tensor& t) {
    Tensor h;
    if (!t.IsInitialized() || t.GetDevice()->Type() == DeviceType::kCPU) {
      h = t;
    } else {
      h.CopyFrom(t, host);
    }
    return h;
  };
  auto copy_var = [&](const Variable& from, Variable& to, bool data) {
    to.SetType(from.Type());
    to.GetStepScopes() = const_cast<Variable&>(from).GetStepScopes();
    if (data) {
      to.GetTensor() = to_host(from.GetTensor());
    } else {
      to.GetTensor().Resize(from.GetTensor().GetShape());
      to.GetTensor().SetDType(from.GetTensor().GetDType());
    }
    to.GetArray().clear();
    for (const Tensor& t : from.GetArray()) to.GetArray().push_back(to_host(t));
  };
  if (info.traits.control_flow) {
    for (const auto& [slot, args] : op.Inputs())
      for (const auto& name : args) {
        Variable* v = name == kEmptyVarName ? nullptr : scope.FindVar(name);
        if (v) copy_var(Variable(*v), *v, true);
      }
    RunContext host_run = run;
    std::unique_ptr<Executor> host_executor;
    if (run.executor) {
      host_executor = CreateExecutor(run.executor->Name(), host, run.executor->Options());
      host_run.executor = host_executor.get();
    }
    kernel.fn(ExecutionContext(op, scope, host, &host_run));
    return;
  }
  Scope& local = scope.NewScope();
  struct DropLocal {
    Scope& parent;
    Scope* kid;
    ~DropLocal() { parent.DeleteScope(kid); }
  } drop{scope, &local};
  for (const auto& [slot, args] : op.Inputs())
    for (const auto& name : args) {
      Variable* v = name == kEmptyVarName ? nullptr : scope.FindVar(name);
      if (v && !local.FindLocalVar(name)) copy_var(*v, *local.Var(name), true);
    }
  for (const auto& [slot, args] : op.Outputs())
    for (const auto& name : args) {
      Variable* v = name == kEmptyVarName ? nullptr : scope.FindVar(name);
      if (v && !local.FindLocalVar(name)) copy_var(*v, *local.Var(name), v->Type() != VarType::kDense);
    }
  auto on_device = [&device](const Tensor& t) { return t.IsInitialized() && t.GetDevice() == &device; };
  std::set<std::string> was_on_device;
  for (const auto& [slot, args] : op.Outputs())
    for (const auto& name : args) {
      Variable* v = name == kEmptyVarName ? nullptr : scope.FindVar(name);
      if (v && (on_device(v->GetTensor()) || (!v->GetArray().empty() && on_device(v->GetArray().front()))))
        was_on_device.insert(name);
    }
  kernel.fn(ExecutionContext(op, local, host, &run));
  auto put = [&host](Tensor& dst, const Tensor& src, Device& to) {
    if (&to == &host) {
      dst = src;
    } else {
      dst.CopyFrom(src, to);
    }
  };
  for (const auto& [slot, args] : op.Outputs())
    for (const auto& name : args) {
      Variable* h = name == kEmptyVarName ? nullptr : local.FindLocalVar(name);
      Variable* v = h ? scope.FindVar(name) : nullptr;
      if (!v) continue;
      Device& to = run.outputs_on_device || was_on_device.count(name) ? device : host;
      v->SetType(h->Type());
      if (h->GetTensor().IsInitialized()) put(v->GetTensor(), h->GetTensor(), to);
      v->GetArray().resize(h->GetArray().size());
      for (size_t i = 0; i < h->GetArray().size(); ++i)
        if (h->GetArray()[i].IsInitialized()) put(v->GetArray()[i], h->GetArray()[i], to);
      v->GetStepScopes() = h->GetStepScopes();
    }
}

// ---------------------------------------------------------------- checked mode

uint64_t Fingerprint(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  const auto* p = static_cast<const unsigned char*>(t.RawData());
  for (size_t i = 0, n = t.Bytes(); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

bool OnHost(const Tensor& t) { return t.IsInitialized() && t.GetDevice()->Type() == DeviceType::kCPU; }

// Checked mode's watch over one kernel (nabla/checked.h): what inference
// gave each output, a fingerprint of every host input the op only reads, and
// after the kernel the canaries, shapes, dtypes and fingerprints. While the
// kernel runs it answers for a fault in one of its buffers' guard pages.
class KernelWatch final : public checked::FaultReporter {
 public:
  KernelWatch(const OpDesc& op, const OpInfo& info, const VarAccess& vars, const RunContext& run)
      : op_(op), info_(info), vars_(vars), where_(Where(op, run)) {}
  ~KernelWatch() {
    if (watching_) checked::SetFaultReporter(this, false);
  }

  std::vector<InferredOutput> inferred;  // filled by run-time inference

  void BeforeKernel() {
    // Ops that run blocks read and write the loop's vars through them.
    if (!info_.traits.control_flow && !info_.traits.has_sub_block) {
      for (const auto& [slot, args] : op_.Inputs())
        for (size_t i = 0; i < args.size(); ++i) {
          if (IsOutput(args[i])) continue;
          Variable* v = vars_.InOrNull(slot, i);
          if (v && v->Type() == VarType::kDense && OnHost(v->GetTensor()))
            inputs_.push_back({slot, i, v, Fingerprint(v->GetTensor())});
        }
    }
    checked::SetFaultReporter(this, true);
    watching_ = true;
  }

  void AfterKernel() {
    checked::SetFaultReporter(this, false);
    watching_ = false;
    for (const auto& [slot, args] : op_.Outputs())
      for (size_t i = 0; i < args.size(); ++i) {
        Variable* v = vars_.Out(slot, i);
        if (!v) continue;
        if (v->Type() == VarType::kDense) {
          CheckCanaries(v->GetTensor(), "output", slot, i, args[i]);
          CheckInferred(v->GetTensor(), slot, i, args[i]);
        }
        for (size_t k = 0; k < v->GetArray().size(); ++k)
          CheckCanaries(v->GetArray()[k], "output", slot, i, StrCat(args[i], "[", k, "]"));
      }
    for (const Input& in : inputs_) {
      const Tensor& t = in.var->GetTensor();
      const std::string& name = op_.Input(in.slot)[in.i];
      CheckCanaries(t, "input", in.slot, in.i, name);
      NABLA_ENFORCE(!OnHost(t) || Fingerprint(t) == in.fingerprint, kRuntime, "checked mode: the kernel changed input ",
                    SlotName(in.slot, in.i), " (var '", name, "', ", t.DebugString(), "), which the op only reads");
    }
  }

  std::string Describe(const void* data) const override {
    auto hit = [data](const Tensor& t) { return OnHost(t) && t.RawData() == data; };
    for (const auto& [slot, args] : op_.Outputs())
      for (size_t i = 0; i < args.size(); ++i) {
        Variable* v = vars_.Out(slot, i);
        if (!v) continue;
        bool found = v->Type() == VarType::kDense && hit(v->GetTensor());
        for (const Tensor& t : v->GetArray()) found = found || hit(t);
        if (found)
          return StrCat(where_, ": checked mode: the kernel wrote past the end of output ", SlotName(slot, i),
                        " (var '", args[i], "', ", InferredText(v->GetTensor(), slot, i),
                        ") into the inaccessible page after it");
      }
    for (const Input& in : inputs_)
      if (hit(in.var->GetTensor()))
        return StrCat(where_, ": checked mode: the kernel wrote past the end of input ", SlotName(in.slot, in.i),
                      " (var '", op_.Input(in.slot)[in.i], "', ", in.var->GetTensor().DebugString(),
                      ") into the inaccessible page after it");
    return "";
  }

 private:
  struct Input {
    std::string slot;
    size_t i;
    Variable* var;
    uint64_t fingerprint;
  };

  bool IsOutput(const std::string& name) const {
    for (const auto& [slot, args] : op_.Outputs())
      for (const auto& a : args)
        if (a == name) return true;
    return false;
  }
  // "Out", or "X[1]" for the second var of a duplicable slot.
  std::string SlotName(const std::string& slot, size_t i) const {
    return op_.Output(slot).size() > 1 || op_.Input(slot).size() > 1 ? StrCat(slot, "[", i, "]") : slot;
  }
  const InferredOutput* Inferred(const std::string& slot, size_t i) const {
    for (const InferredOutput& r : inferred)
      if (r.slot == slot && r.i == i) return &r;
    return nullptr;
  }
  // "inferred float32[3]", or the tensor's own shape where inference set none.
  std::string InferredText(const Tensor& t, const std::string& slot, size_t i) const {
    const InferredOutput* r = Inferred(slot, i);
    if (r && r->has_shape)
      return StrCat("inferred ", DTypeName(r->has_dtype ? r->dtype : t.GetDType()), ShapeToString(r->shape), ", ",
                    t.Bytes(), " bytes");
    return StrCat(t.DebugString(), " (no inferred shape), ", t.Bytes(), " bytes");
  }

  void CheckCanaries(const Tensor& t, const char* kind, const std::string& slot, size_t i,
                     const std::string& name) const {
    if (!OnHost(t)) return;
    const checked::GuardCheck g = checked::CheckGuards(t.RawData());
    if (!g.guarded) return;
    const std::string what = StrCat(kind, " ", SlotName(slot, i), " (var '", name, "', ",
                                    *kind == 'o' ? InferredText(t, slot, i) : t.DebugString(), ")");
    NABLA_ENFORCE(g.overwritten_after == 0, kRuntime, "checked mode: the kernel wrote ", g.overwritten_after,
                  " bytes past the end of ", what);
    NABLA_ENFORCE(g.overwritten_before == 0, kRuntime, "checked mode: the kernel wrote ", g.overwritten_before,
                  " bytes before the start of ", what);
  }

  void CheckInferred(const Tensor& t, const std::string& slot, size_t i, const std::string& name) const {
    const InferredOutput* r = Inferred(slot, i);
    if (!r || !t.IsInitialized()) return;
    const bool known = r->has_shape && NumElements(r->shape) >= 0;
    NABLA_ENFORCE((!known || t.GetShape() == r->shape) && (!r->has_dtype || t.GetDType() == r->dtype), kRuntime,
                  "checked mode: the kernel left output ", SlotName(slot, i), " (var '", name, "') as ",
                  t.DebugString(), ", but shape inference gave ", DTypeName(r->has_dtype ? r->dtype : t.GetDType()),
                  r->has_shape ? ShapeToString(r->shape) : ShapeToString(t.GetShape()));
  }

  const OpDesc& op_;
  const OpInfo& info_;
  const VarAccess& vars_;
  std::string where_;
  std::vector<Input> inputs_;
  bool watching_ = false;
};

// A dry run (the null device) can only follow what shape inference decides.
void CheckDryRunInputs(const OpDesc& op, const OpInfo& info, const Scope& scope) {
  NABLA_ENFORCE(!info.traits.control_flow, kUnimplemented,
                "a dry run on the null device cannot follow control flow: it needs the data that decides branches "
                "and trip counts");
  NABLA_ENFORCE(info.infer_shape != nullptr, kUnimplemented,
                "the op has no shape inference, so a dry run on the null device cannot follow it");
  for (const auto& [slot, args] : op.Inputs())
    for (const auto& name : args) {
      const Variable* v = name == kEmptyVarName ? nullptr : scope.FindVar(name);
      NABLA_ENFORCE(v == nullptr || v->Type() != VarType::kDense || v->GetTensor().IsInitialized(), kNotFound, "input ",
                    slot, " (var '", name, "') has no value: feed it or give it an init");
    }
}

// The outputs get sentinel buffers of the inferred shape and dtype, so the
// ops after them see a shape as they would in a real run.
void FinishDryRunOutputs(const OpDesc& op, const VarAccess& vars, Device& device) {
  for (const auto& [slot, args] : op.Outputs())
    for (size_t i = 0; i < args.size(); ++i) {
      Variable* v = vars.Out(slot, i);
      if (v == nullptr || v->Type() != VarType::kDense) continue;
      Tensor& t = v->GetTensor();
      NABLA_ENFORCE(NumElements(t.GetShape()) >= 0, kInvalidArgument, "output ", slot, " (var '", args[i],
                    "') has shape ", ShapeToString(t.GetShape()),
                    " after shape inference; a dry run needs every dimension known");
      t.Allocate(device);
    }
}

bool ReadsVar(const OpDesc& op, const std::string& name) {
  for (const auto& [slot, args] : op.Inputs())
    for (const auto& in : args)
      if (in == name) return true;
  return false;
}

// An op that writes a var it also reads would have shape inference resize,
// and its kernel overwrite, the input it is still reading: mul(X=h, Y=w) ->
// h gave zeros. Ops that update a var on purpose declare UpdatesInPlace
// (optimizers, batch_norm's running statistics, collectives); ops owning a
// block carry their state through it. Every other such op of a top-level
// block or an eager call runs on fresh outputs (DispatchWithFreshOutputs),
// which costs one buffer per run; loop bodies are left as they were (the
// backward builder's overwrite pass renames what their grad ops need).
bool WritesItsInput(const OpDesc& op, const OpInfo& info) {
  if (info.traits.updates_in_place || info.traits.has_sub_block || info.traits.control_flow) return false;
  for (const auto& [slot, args] : op.Outputs())
    for (const auto& out : args)
      if (out != kEmptyVarName && ReadsVar(op, out)) return true;
  return false;
}

void Dispatch(const OpDesc& op, const OpInfo* info, const OpRegistry& registry, const PreparedOp* prepared,
              Scope& scope, Device& device, const RunContext& run);

// Runs the op with its outputs bound to new variables, then moves what it
// wrote into the real ones: inputs are read intact, as if the op had written
// a new var and an assign had copied it back.
void DispatchWithFreshOutputs(const OpDesc& op, const OpInfo* info, const OpRegistry& registry,
                              const PreparedOp* prepared, Scope& scope, Device& device, const RunContext& run) {
  // prepared is never null here.
  PreparedOp fresh = *prepared;
  fresh.writes_its_input = false;
  std::vector<std::unique_ptr<Variable>> temps;
  std::vector<std::pair<Variable*, Variable*>> moves;  // (real, temp)
  for (size_t si = 0; si < fresh.outputs.size(); ++si) {
    const auto& args = op.Output(fresh.outputs[si].name);
    for (size_t i = 0; i < fresh.outputs[si].vars.size() && i < args.size(); ++i) {
      Variable*& v = fresh.outputs[si].vars[i];
      if (args[i] == kEmptyVarName) continue;
      if (v == nullptr) v = scope.FindVar(args[i]);
      if (v == nullptr) v = scope.Var(args[i]);
      // Only a dense value the op also reads; tensor arrays and step scopes
      // are appended to in place by design.
      if (v->Type() != VarType::kDense || !v->GetTensor().IsInitialized() || !ReadsVar(op, args[i])) continue;
      temps.push_back(std::make_unique<Variable>());
      temps.back()->SetType(v->Type());
      moves.emplace_back(v, temps.back().get());
      v = temps.back().get();
    }
  }
  Dispatch(op, info, registry, &fresh, scope, device, run);
  for (auto& [real, temp] : moves) {
    if (temp->GetTensor().IsInitialized()) real->GetTensor() = std::move(temp->GetTensor());
  }
}

// The one dispatch path: shape inference, kernel choice, kernel; errors get
// the op's position once.
void Dispatch(const OpDesc& op, const OpInfo* info, const OpRegistry& registry, const PreparedOp* prepared,
              Scope& scope, Device& device, const RunContext& run) {
  // Only prepared ops (a top-level block, eager calls): the step scopes of a
  // loop body share carried buffers with the loop's vars, and the control-flow
  // grad ops rely on in-place writes there (increment(i) -> i).
  if (prepared && prepared->writes_its_input) {
    DispatchWithFreshOutputs(op, info, registry, prepared, scope, device, run);
    return;
  }
  try {
    NABLA_ENFORCE(info != nullptr, kNotFound, "unknown op type '", op.Type(), "'");
    VarAccess vars(op, scope, prepared);
    if (!prepared) {
      for (const auto& [slot, args] : op.Outputs())
        for (const auto& name : args)
          if (name != kEmptyVarName && !scope.FindVar(name)) scope.Var(name);
    }
    const bool dry = IsDryRun(device);
    if (dry) CheckDryRunInputs(op, *info, scope);
    // Checked mode infers on every call: the kernel's result is held to it.
    std::optional<KernelWatch> watch;
    if (checked::On() && !dry) watch.emplace(op, *info, vars, run);
    if (info->infer_shape && !info->traits.control_flow &&
        (dry || !prepared || watch || !prepared->ShapesAsMemoized())) {
      RuntimeInferShapeContext isc(op, vars, run.program, watch ? &watch->inferred : nullptr);
      internal::CallPlugin(info->origin, "shape inference", [&] { info->infer_shape(isc); });
      if (prepared && !dry) {
        if (isc.ReadValues()) {
          prepared->shape_memo.valid = false;
        } else {
          prepared->MemoizeShapes();
        }
      }
    }
    if (dry) {
      FinishDryRunOutputs(op, vars, device);
      return;
    }
    ExecutionContext ctx =
        prepared ? ExecutionContext(*prepared, scope, device, &run) : ExecutionContext(op, scope, device, &run);
    DType dtype = DType::kFloat32;
    if (info->kernel_dtype) {
      dtype = info->kernel_dtype(ctx);
    } else if (Variable* v = vars.FirstDenseInput(info->schema)) {
      dtype = v->GetTensor().GetDType();
    }
    const KernelInfo* kernel = prepared ? prepared->Kernel(registry, device.Type(), dtype)
                                        : registry.FindKernel(op.Type(), device.Type(), dtype);
    if (!kernel && device.Type() != DeviceType::kCPU && HostFallback(device.Type())) {
      const KernelInfo* host = prepared ? prepared->Kernel(registry, DeviceType::kCPU, dtype)
                                        : registry.FindKernel(op.Type(), DeviceType::kCPU, dtype);
      if (host) {
        if (watch) watch->BeforeKernel();
        internal::CallPlugin(host->origin, "its cpu kernel (on host copies)",
                             [&] { RunOnHost(op, *info, *host, scope, device, run, dtype); });
        if (watch) watch->AfterKernel();
        return;
      }
    }
    if (!kernel) ThrowNoKernel(registry, op, device, dtype);
    if (watch) watch->BeforeKernel();
    internal::CallPlugin(kernel->origin, "its kernel", [&] { kernel->fn(ctx); });
    if (watch) watch->AfterKernel();
  } catch (const Error& e) {
    std::string msg = e.what();
    // A kernel that names its op ("op 'T': ...", the kit's style) gets the
    // position in front of that name; a message naming another op (a
    // sub-block's, positioned already) is left as it is.
    const std::string self = StrCat("op '", op.Type(), "'");
    if (msg.rfind(self, 0) == 0 && msg.size() > self.size() && (msg[self.size()] == ':' || msg[self.size()] == ' ')) {
      const std::string where = Where(op, run);
      if (where == self) throw;
      throw Error(e.kind(), where + msg.substr(self.size()));
    }
    // Sub-block ops already name themselves; add our position only once.
    if (msg.rfind("op '", 0) == 0 || msg.find(": op '") != std::string::npos) throw;
    throw Error(e.kind(), Where(op, run) + ": " + msg);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::kExternal, Where(op, run) + ": out of memory");
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, Where(op, run) + ": " + e.what());
  }
}

}  // namespace

void DispatchPrepared(const PreparedOp& prepared, const OpRegistry& registry, Scope& scope, Device& device,
                      const RunContext& run) {
  Dispatch(*prepared.op, prepared.info, registry, &prepared, scope, device, run);
}

void RunOp(const OpDesc& op, Scope& scope, Device& device, const RunContext& run) {
  auto registry = CurrentRegistry();
  Dispatch(op, registry->Find(op.Type()), *registry, nullptr, scope, device, run);
}

PreparedBlock::PreparedBlock(const ProgramDesc& program, int block_idx, Scope& scope)
    : program_(&program),
      block_idx_(block_idx),
      scope_(&scope),
      scope_id_(scope.Id()),
      scope_generation_(scope.Generation()),
      registry_(CurrentRegistry()) {
  const BlockDesc& block = *program.Block(block_idx);
  for (const auto& op : block.AllOps()) op_versions_.emplace_back(op.get(), op->Version());
  auto resolve = [&scope](const VarNameMap& slots, bool create) {
    std::vector<PreparedSlot> out;
    for (const auto& [slot, args] : slots) {
      PreparedSlot s{slot, {}};
      for (const auto& name : args) {
        Variable* v = nullptr;
        if (name != kEmptyVarName) {
          v = scope.FindVar(name);
          if (!v && create) v = scope.Var(name);
        }
        s.vars.push_back(v);
      }
      out.push_back(std::move(s));
    }
    return out;
  };
  for (const auto& op : block.AllOps()) {
    auto p = std::make_unique<PreparedOp>();
    p->op = op.get();
    p->info = registry_->Find(op->Type());
    // Outputs first: an op may read what an earlier op of the block writes.
    p->outputs = resolve(op->Outputs(), true);
    ops_.push_back(std::move(p));
  }
  for (auto& p : ops_) {
    p->inputs = resolve(p->op->Inputs(), false);
    p->CacheKernels(*registry_);
  }
}

PreparedBlock::~PreparedBlock() = default;

namespace {

// Calls f(tensor) for every var of the op's slots, inputs first, while f
// says to go on. False where the memo cannot follow the op: a var that did
// not exist when the block was prepared, or one that is not a dense tensor.
template <typename F>
bool ForEachMemoTensor(const PreparedOp& p, F&& f) {
  for (const auto* slots : {&p.inputs, &p.outputs}) {
    const bool in = slots == &p.inputs;
    for (const PreparedSlot& s : *slots)
      for (size_t i = 0; i < s.vars.size(); ++i) {
        const Variable* v = s.vars[i];
        if (v == nullptr) {
          const auto& args = in ? p.op->Input(s.name) : p.op->Output(s.name);
          if (i < args.size() && args[i] == kEmptyVarName) continue;
          return false;
        }
        if (v->Type() != VarType::kDense || !f(v->GetTensor())) return false;
      }
  }
  return true;
}

// Shape's operator== calls memcmp; for a handful of dims per tensor, on
// every op of every step, the call cost more than the compare.
bool SameDims(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

bool PreparedOp::ShapesAsMemoized() const {
  if (!shape_memo.valid || shape_memo.op_version != op->Version()) return false;
  if (memo_sets_outputs) {
    // Inputs first: nothing is written unless every input matches.
    size_t k = 0;
    for (const PreparedSlot& s : inputs)
      for (const Variable* v : s.vars) {
        if (v == nullptr) continue;  // @EMPTY@: eager binds every other input var
        if (k == shape_memo.n_inputs) return false;
        const auto& [shape, dtype] = shape_memo.seen[k++];
        const Tensor& t = v->GetTensor();
        if (v->Type() != VarType::kDense || t.GetDType() != dtype || !SameDims(t.GetShape(), shape)) return false;
      }
    if (k != shape_memo.n_inputs) return false;
    for (const PreparedSlot& s : outputs)
      for (Variable* v : s.vars) {
        if (v == nullptr) continue;
        if (k == shape_memo.seen.size()) return false;
        const auto& [shape, dtype] = shape_memo.seen[k++];
        Tensor& t = v->GetTensor();
        if (!SameDims(t.GetShape(), shape)) t.Resize(shape);
        t.SetDType(dtype);
      }
    return k == shape_memo.seen.size();
  }
  size_t k = 0;
  const bool same = ForEachMemoTensor(*this, [&](const Tensor& t) {
    if (k == shape_memo.seen.size()) return false;
    const auto& [shape, dtype] = shape_memo.seen[k++];
    return t.GetDType() == dtype && SameDims(t.GetShape(), shape);
  });
  return same && k == shape_memo.seen.size();
}

void PreparedOp::MemoizeShapes() const {
  // Eager calls re-memoize on every call: entries are overwritten in place,
  // so their dims keep their allocations.
  auto& seen = shape_memo.seen;
  size_t k = 0;
  shape_memo.op_version = op->Version();
  size_t n_in = 0;
  for (const PreparedSlot& s : inputs)
    for (const Variable* v : s.vars) n_in += v != nullptr;
  shape_memo.n_inputs = n_in;
  shape_memo.valid = ForEachMemoTensor(*this, [&](const Tensor& t) {
    if (k == seen.size()) seen.emplace_back();
    seen[k].first.assign(t.GetShape().begin(), t.GetShape().end());
    seen[k++].second = t.GetDType();
    return true;
  });
  seen.resize(k);
}

void PreparedOp::CacheKernels(const OpRegistry& registry) {
  writes_its_input = info != nullptr && WritesItsInput(*op, *info);
  attrs =
      std::make_shared<const std::vector<std::pair<std::string, Attribute>>>(op->Attrs().begin(), op->Attrs().end());
  cached_device_types = std::min(static_cast<size_t>(DeviceTypeCount()), kCachedDeviceTypes);
  for (size_t d = 0; d < cached_device_types; ++d)
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool, DType::kBFloat16})
      kernels[d][static_cast<size_t>(t)] = registry.FindKernel(op->Type(), static_cast<DeviceType>(d), t);
}

const OpDesc& PreparedBlock::Op(size_t i) const { return *ops_.at(i)->op; }

void PreparedBlock::Run(size_t i, Device& device, const RunContext& run) const {
  const PreparedOp& p = *ops_[i];
  Dispatch(*p.op, p.info, *registry_, &p, *scope_, device, run);
}

bool PreparedBlock::Matches(const ProgramDesc& program, int block_idx, const Scope& scope) const {
  if (&program != program_ || block_idx != block_idx_ || &scope != scope_ || scope.Id() != scope_id_ ||
      scope.Generation() != scope_generation_)
    return false;
  return SameOps(*program.Block(block_idx)) && CurrentRegistry() == registry_;
}

bool PreparedBlock::SameOps(const BlockDesc& block) const {
  if (block.OpSize() != op_versions_.size()) return false;
  for (size_t i = 0; i < op_versions_.size(); ++i)
    if (block.Op(i) != op_versions_[i].first || block.Op(i)->Version() != op_versions_[i].second) return false;
  return true;
}

namespace {
std::mutex g_exec_mutex;
std::map<std::string, ExecutorFactory>& Factories() {
  static std::map<std::string, ExecutorFactory> f;
  return f;
}
}  // namespace

void RegisterExecutor(const std::string& name, ExecutorFactory factory) {
  std::lock_guard<std::mutex> lock(g_exec_mutex);
  Factories()[name] = std::move(factory);
}

std::vector<std::string> ExecutorNames() {
  std::lock_guard<std::mutex> lock(g_exec_mutex);
  std::vector<std::string> names;
  for (const auto& [n, f] : Factories()) names.push_back(n);
  return names;
}

std::unique_ptr<Executor> CreateExecutor(const std::string& name, Device& device, const ExecutorOptions& options) {
  // TBB takes any count for an arena, but one of 70000 threads crashed in
  // its destructor (nabla.Executor(threads=70000), then del).
  constexpr int kMaxThreads = 4096;
  NABLA_ENFORCE(options.threads >= 0 && options.threads <= kMaxThreads, kInvalidArgument,
                "executor threads must be from 0 (all cores) to ", kMaxThreads, " but received ", options.threads);
  ExecutorFactory factory;
  {
    std::lock_guard<std::mutex> lock(g_exec_mutex);
    auto it = Factories().find(name);
    if (it != Factories().end()) factory = it->second;
  }
  if (!factory) {
    std::string names;
    for (const auto& n : ExecutorNames()) names += (names.empty() ? "" : ", ") + n;
    NABLA_THROW(kInvalidArgument, "unknown executor '", name, "'; expected one of: ", names);
  }
  return factory(device, options);
}

}  // namespace nabla
