#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "device_plugins.h"
#include "nabla/op_registry.h"
#include "registry_internal.h"

namespace nabla {

// ------------------------------------------------------------ schema

namespace {
template <typename T>
const T* FindByName(const std::vector<T>& v, const std::string& name) {
  for (const auto& x : v)
    if (x.name == name) return &x;
  return nullptr;
}
}  // namespace

const SlotDef* OpSchema::FindInput(const std::string& name) const { return FindByName(inputs, name); }
const SlotDef* OpSchema::FindOutput(const std::string& name) const { return FindByName(outputs, name); }
const AttrDef* OpSchema::FindAttr(const std::string& name) const { return FindByName(attrs, name); }

std::string Origin::ToString() const {
  std::string s = plugin.empty() ? "<in-process>" : plugin;
  if (!path.empty()) s += " (" + path + ")";
  if (!file.empty()) {
    std::string base = file.substr(file.find_last_of('/') + 1);
    s += StrCat(" at ", base, ":", line);
  }
  return s;
}

InferShapeContext::~InferShapeContext() = default;

// ------------------------------------------------------------ grad makers

GradOpDescMakerBase::GradOpDescMakerBase(const OpDesc& fwd, const std::unordered_set<std::string>& no_grad_set,
                                         std::unordered_map<std::string, std::string>* grad_to_var,
                                         const std::vector<BlockDesc*>& grad_blocks)
    : fwd_(fwd), no_grad_set_(no_grad_set), grad_to_var_(grad_to_var), grad_blocks_(grad_blocks) {}

GradOpDescMakerBase::~GradOpDescMakerBase() = default;

std::vector<std::string> GradOpDescMakerBase::GradNames(const std::vector<std::string>& names, bool is_input) const {
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const auto& n : names) {
    if (n == kEmptyVarName || (is_input && no_grad_set_.count(n))) {
      out.push_back(kEmptyVarName);
      continue;
    }
    std::string g = GradVarName(n);
    if (grad_to_var_) (*grad_to_var_)[g] = n;
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::string> GradOpDescMakerBase::InputGrad(const std::string& slot) const {
  if (IsNoGradInput(slot)) return std::vector<std::string>(fwd_.Input(slot).size(), kEmptyVarName);
  return GradNames(fwd_.Input(slot), true);
}

bool GradOpDescMakerBase::IsNoGradInput(const std::string& slot) const {
  const OpInfo* info = CurrentRegistry()->Find(fwd_.Type());
  const SlotDef* def = info ? info->schema.FindInput(slot) : nullptr;
  return def != nullptr && def->no_grad;
}

std::vector<std::string> GradOpDescMakerBase::OutputGrad(const std::string& slot) const {
  return GradNames(fwd_.Output(slot), false);
}

std::vector<std::string> GradOpDescMakerBase::InputSlots() const {
  std::vector<std::string> s;
  for (const auto& [k, v] : fwd_.Inputs()) s.push_back(k);
  return s;
}
std::vector<std::string> GradOpDescMakerBase::OutputSlots() const {
  std::vector<std::string> s;
  for (const auto& [k, v] : fwd_.Outputs()) s.push_back(k);
  return s;
}

BlockDesc* GradOpDescMakerBase::GradBlock(size_t i) const {
  NABLA_ENFORCE(i < grad_blocks_.size(), kPreconditionNotMet, "op '", fwd_.Type(), "' has no grad block ", i,
                " (the backward builder made ", grad_blocks_.size(), ")");
  return grad_blocks_[i];
}

std::vector<std::unique_ptr<OpDesc>> DefaultGradOpDescMaker::operator()() const {
  auto op = std::make_unique<OpDesc>();
  op->SetType(ForwardOp().Type() + "_grad");
  for (const auto& slot : InputSlots()) {
    op->SetInput(slot, Input(slot));
    if (!IsNoGradInput(slot)) op->SetOutput(slot + kGradSuffix, InputGrad(slot));
  }
  for (const auto& slot : OutputSlots()) {
    op->SetInput(slot, Output(slot));
    op->SetInput(slot + kGradSuffix, OutputGrad(slot));
  }
  op->MutableAttrs() = Attrs();
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::move(op));
  return ops;
}

// ------------------------------------------------------------ registry

const OpInfo* OpRegistry::Find(const std::string& type) const {
  auto it = ops_.find(type);
  return it == ops_.end() ? nullptr : &it->second;
}

const OpInfo& OpRegistry::Get(const std::string& type) const {
  if (const OpInfo* info = Find(type)) return *info;
  std::string loaded;
  for (const auto& p : plugins_) loaded += (loaded.empty() ? "" : ", ") + p.name;
  NABLA_THROW(kNotFound, "unknown op type '", type, "'; loaded plugins: ", loaded.empty() ? "none" : loaded,
              " (add one with --plugin FILE)");
}

const KernelInfo* OpRegistry::FindKernel(const std::string& type, DeviceType device, DType dtype) const {
  auto it = kernels_.find(std::make_tuple(type, device, dtype));
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::pair<DeviceType, DType>> OpRegistry::KernelsOf(const std::string& type) const {
  std::vector<std::pair<DeviceType, DType>> out;
  for (auto it = kernels_.lower_bound(std::make_tuple(type, DeviceType::kCPU, DType::kFloat32));
       it != kernels_.end() && std::get<0>(it->first) == type; ++it)
    out.emplace_back(std::get<1>(it->first), std::get<2>(it->first));
  return out;
}

std::vector<std::string> OpRegistry::OpTypes() const {
  std::vector<std::string> t;
  t.reserve(ops_.size());
  for (const auto& [k, v] : ops_) t.push_back(k);
  std::sort(t.begin(), t.end());
  return t;
}

namespace {
std::mutex g_publish_mutex;
std::shared_ptr<const OpRegistry>& LiveRegistry() {
  static std::shared_ptr<const OpRegistry> live = std::make_shared<OpRegistry>();
  return live;
}
}  // namespace

std::shared_ptr<const OpRegistry> CurrentRegistry() { return std::atomic_load(&LiveRegistry()); }

namespace {
std::atomic<uint64_t> g_registry_generation{0};
}  // namespace

uint64_t RegistryGeneration() { return g_registry_generation.load(std::memory_order_acquire); }

class RegistryTransaction {
 public:
  static void Commit(Registrar::Impl& batch) {
    std::lock_guard<std::mutex> lock(g_publish_mutex);
    std::shared_ptr<const OpRegistry> live = std::atomic_load(&LiveRegistry());
    std::vector<std::string> problems = batch.problems;
    std::string who = batch.plugin_path.empty() ? batch.plugin_name : batch.plugin_path;
    if (!batch.registration_error.empty()) problems.push_back("registration threw: " + batch.registration_error);
    for (const auto& p : live->plugins_)
      if (p.name == batch.plugin_name && !batch.plugin_name.empty())
        problems.push_back(
            StrCat("a plugin named '", p.name, "' is already loaded from ", p.path.empty() ? "<in-process>" : p.path));
    for (const auto& type : batch.op_order) {
      const OpInfo& info = *batch.ops.at(type);
      if (const OpInfo* old = live->Find(type))
        problems.push_back(StrCat("op '", type, "' registered by ", info.origin.ToString(), " is already owned by ",
                                  old->origin.ToString()));
      for (const auto& a : info.schema.attrs)
        if (a.default_value && TypeOf(*a.default_value) != a.type)
          problems.push_back(StrCat("attribute '", a.name, "' of op '", type, "' is declared ", AttrTypeName(a.type),
                                    " but its default is ", AttrTypeName(TypeOf(*a.default_value))));
    }
    // Device backends: one name, one backend. A plugin with a backend may
    // carry kernels for other plugins' ops on its own device type.
    std::set<DeviceType> own_devices;
    {
      const std::vector<std::string> live_backends = internal::RegisteredDeviceBackendNames();
      std::set<std::string> staged;
      for (const StagedDeviceBackend& b : batch.device_backends) {
        if (std::find(live_backends.begin(), live_backends.end(), b.name) != live_backends.end())
          problems.push_back(
              StrCat("device backend '", b.name, "' is already registered (a device backend name is registered once)"));
        if (!staged.insert(b.name).second)
          problems.push_back(StrCat("device backend '", b.name, "' registered twice in the same plugin"));
        own_devices.insert(RegisterDeviceType(b.name));
      }
    }
    std::set<std::tuple<std::string, DeviceType, DType>> seen;
    for (const auto& [key, k] : batch.kernels) {
      const std::string& type = std::get<0>(key);
      // A kernel lives beside its op, in the plugin that defines it: one
      // for another plugin's op would depend on that plugin's load order and
      // slot names, so it is refused like one for an op nobody defines.
      // The exception is a device plugin's kernels on its own device, for
      // ops already loaded: a device vendor writes those.
      const bool device_vendor = own_devices.count(std::get<1>(key)) && live->Find(type);
      if (!batch.ops.count(type) && !device_vendor) {
        const OpInfo* owner = live->Find(type);
        problems.push_back(StrCat(owner ? "kernel for op '" : "kernel for unknown op '", type, "' (",
                                  DeviceTypeName(std::get<1>(key)), ", ", DTypeName(std::get<2>(key)), ") at ",
                                  k.origin.ToString(),
                                  owner ? ", which this plugin does not define (it is owned by " +
                                              owner->origin.ToString() + "; register kernels in the op's plugin)"
                                        : std::string()));
      }
      if (!seen.insert(key).second || live->kernels_.count(key)) {
        const KernelInfo* old = live->FindKernel(type, std::get<1>(key), std::get<2>(key));
        problems.push_back(StrCat("kernel (", type, ", ", DeviceTypeName(std::get<1>(key)), ", ",
                                  DTypeName(std::get<2>(key)), ") registered twice: ", k.origin.ToString(),
                                  old ? " and " + old->origin.ToString() : std::string()));
      }
    }
    if (!problems.empty()) {
      std::string msg = who + ": plugin rejected: ";
      for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
      NABLA_THROW(kInvalidArgument, msg, " (the registry is unchanged)");
    }
    auto next = std::make_shared<OpRegistry>(*live);
    OpRegistry::PluginRecord record{batch.plugin_name, batch.plugin_path, batch.abi, batch.op_order};
    for (const auto& type : batch.op_order) {
      OpInfo info = std::move(*batch.ops.at(type));
      info.library = batch.library;
      next->ops_.emplace(type, std::move(info));
    }
    for (auto& [key, k] : batch.kernels) {
      k.library = batch.library;
      next->kernels_.emplace(key, std::move(k));
    }
    next->plugins_.push_back(std::move(record));
    std::atomic_store(&LiveRegistry(), std::shared_ptr<const OpRegistry>(std::move(next)));
    // Validated above: neither call throws.
    for (StagedDeviceBackend& b : batch.device_backends) {
      SetHostFallback(RegisterDeviceType(b.name), b.host_fallback);
      RegisterDeviceBackend(b.name, std::move(b.backend));
    }
    g_registry_generation.fetch_add(1, std::memory_order_release);
  }
};

void CommitRegistrar(Registrar& registrar) { RegistryTransaction::Commit(registrar.GetImpl()); }

}  // namespace nabla
