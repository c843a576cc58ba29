#include "nabla/executor.h"

#include <map>
#include <mutex>

#include "nabla/device.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"

namespace nabla {

Executor::~Executor() = default;

namespace {

// Shape inference over the tensors of a scope, right before the kernel runs.
class RuntimeInferShapeContext final : public InferShapeContext {
 public:
  RuntimeInferShapeContext(const OpDesc& op, Scope& scope) : op_(op), scope_(scope) {}
  const OpDesc& Op() const override { return op_; }
  bool IsRuntime() const override { return true; }
  bool HasInput(const std::string& slot) const override { return Present(op_.Input(slot)); }
  bool HasOutput(const std::string& slot) const override { return Present(op_.Output(slot)); }
  size_t InputSize(const std::string& slot) const override { return op_.Input(slot).size(); }
  size_t OutputSize(const std::string& slot) const override { return op_.Output(slot).size(); }
  Shape InputShape(const std::string& slot, size_t i) const override { return In(slot, i).GetTensor().GetShape(); }
  DType InputDType(const std::string& slot, size_t i) const override { return In(slot, i).GetTensor().GetDType(); }
  VarType InputVarType(const std::string& slot, size_t i) const override { return In(slot, i).Type(); }
  void SetOutputShape(const std::string& slot, const Shape& shape, size_t i) override {
    if (Variable* v = Out(slot, i)) v->GetTensor().Resize(shape);
  }
  void SetOutputDType(const std::string& slot, DType dtype, size_t i) override {
    if (Variable* v = Out(slot, i)) v->GetTensor().SetDType(dtype);
  }

 private:
  static bool Present(const std::vector<std::string>& args) {
    for (const auto& a : args)
      if (a != kEmptyVarName) return true;
    return false;
  }
  Variable& In(const std::string& slot, size_t i) const {
    const auto& args = op_.Input(slot);
    NABLA_ENFORCE(i < args.size() && args[i] != kEmptyVarName, kNotFound, "op '", op_.Type(), "' has no input ",
                  slot, "[", i, "]");
    Variable* v = scope_.FindVar(args[i]);
    NABLA_ENFORCE(v != nullptr, kNotFound, "op '", op_.Type(), "' reads '", args[i],
                  "' but no such variable exists at run time (was it fed or initialized?)");
    return *v;
  }
  Variable* Out(const std::string& slot, size_t i) const {
    const auto& args = op_.Output(slot);
    if (i >= args.size() || args[i] == kEmptyVarName) return nullptr;
    Variable* v = scope_.FindVar(args[i]);
    return v ? v : scope_.Var(args[i]);
  }

  const OpDesc& op_;
  Scope& scope_;
};

DType DefaultKernelDType(const OpInfo& info, const OpDesc& op, Scope& scope) {
  for (const auto& slot : info.schema.inputs) {
    for (const auto& name : op.Input(slot.name)) {
      if (name == kEmptyVarName) continue;
      Variable* v = scope.FindVar(name);
      if (v && v->Type() == VarType::kDense && v->GetTensor().IsInitialized()) return v->GetTensor().GetDType();
    }
  }
  return DType::kFloat32;
}

std::string Where(const OpDesc& op, const RunContext& run) {
  std::string s = StrCat("op '", op.Type(), "'");
  if (run.program) {
    std::string w = run.program->Where(op.Pos());
    if (!w.empty()) s = w + ": " + s;
  }
  return s;
}

}  // namespace

void RunOp(const OpDesc& op, Scope& scope, Device& device, const RunContext& run) {
  auto registry = CurrentRegistry();
  const OpInfo* info = registry->Find(op.Type());
  try {
    NABLA_ENFORCE(info != nullptr, kNotFound, "unknown op type '", op.Type(), "'");
    for (const auto& [slot, args] : op.Outputs())
      for (const auto& name : args)
        if (name != kEmptyVarName && !scope.FindVar(name)) scope.Var(name);
    if (info->infer_shape && !info->traits.control_flow) {
      RuntimeInferShapeContext isc(op, scope);
      info->infer_shape(isc);
    }
    ExecutionContext ctx(op, scope, device, &run);
    DType dtype = info->kernel_dtype ? info->kernel_dtype(ctx) : DefaultKernelDType(*info, op, scope);
    const KernelInfo* kernel = registry->FindKernel(op.Type(), device.Type(), dtype);
    if (!kernel) {
      std::string have;
      for (const auto& [d, t] : registry->KernelsOf(op.Type()))
        have += StrCat(have.empty() ? "" : ", ", DeviceTypeName(d), "/", DTypeName(t));
      NABLA_THROW(kUnimplemented, "no kernel for (", DeviceTypeName(device.Type()), ", ", DTypeName(dtype),
                  "); registered kernels: ", have.empty() ? "none" : have);
    }
    kernel->fn(ctx);
  } catch (const Error& e) {
    std::string msg = e.what();
    // Sub-block ops already name themselves; add our position only once.
    if (msg.rfind("op '", 0) == 0 || msg.find(": op '") != std::string::npos) throw;
    throw Error(e.kind(), Where(op, run) + ": " + msg);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::kExternal, Where(op, run) + ": out of memory");
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, Where(op, run) + ": " + e.what());
  }
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
