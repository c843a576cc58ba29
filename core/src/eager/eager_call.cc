// Eager tensors and calls: the executors' dispatch path over a private scope
// whose variables a call binds to the tensors it is given.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "eager_internal.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/npy.h"
#include "nabla/opcheck.h"

namespace nabla::eager {

using detail::PreparedCall;
using detail::SlotArgs;
using detail::TensorImpl;

namespace {

thread_local bool t_grad_enabled = true;
thread_local Device* t_default_device = nullptr;

std::atomic<uint64_t> g_next_tensor_id{0};

SlotArgs InputArgs(const SlotInput* slots, size_t n, const std::string& type) {
  SlotArgs args;
  args.reserve(n);
  for (size_t s = 0; s < n; ++s) {
    const SlotInput& in = slots[s];
    for (size_t i = 0; i < in.size; ++i)
      NABLA_ENFORCE(in.tensors[i].Defined(), kInvalidArgument, "eager: op '", type, "': input ", *in.slot, "[", i,
                    "] is an undefined tensor");
    NABLA_ENFORCE(s == 0 || *slots[s - 1].slot < *in.slot, kInvalidArgument, "eager: op '", type, "': input slot '",
                  *in.slot, "' given after '", *slots[s - 1].slot,
                  "'; Op::Run takes the slots once each, in ascending name order");
    args.emplace_back(*in.slot, std::vector<bool>(in.size, true));
  }
  return args;
}

SlotArgs InputArgs(const TensorMap& inputs, const std::string& type) {
  detail::SlotInputs slots(inputs);
  return InputArgs(slots.data(), slots.size(), type);
}

// The device of the first input, else the default. A kernel reads every
// input as memory of its own device, so inputs elsewhere are refused here
// rather than handed to it.
Device& CallDevice(const std::string& type, const SlotInput* slots, size_t n) {
  Device* device = nullptr;
  const std::string* first_slot = nullptr;  // no string built unless it is an error: this is every call
  size_t first_index = 0;
  for (size_t s = 0; s < n; ++s) {
    const std::string& slot = *slots[s].slot;
    for (size_t i = 0; i < slots[s].size; ++i) {
      const Tensor& t = slots[s].tensors[i];
      if (!t.Defined() || !t.Data().IsInitialized()) continue;
      if (device == nullptr) {
        device = &t.GetDevice();
        first_slot = &slot;
        first_index = i;
      } else {
        NABLA_ENFORCE(&t.GetDevice() == device, kInvalidArgument, "eager: op '", type, "': input ", slot, "[", i,
                      "] ('", t.Name(), "') is on ", t.GetDevice().Name(), " but input ", *first_slot, "[", first_index,
                      "] is on ", device->Name(), "; move the tensors to one device");
      }
    }
  }
  return device != nullptr ? *device : DefaultDevice();
}

Device& CallDevice(const std::string& type, const TensorMap& inputs) {
  detail::SlotInputs slots(inputs);
  return CallDevice(type, slots.data(), slots.size());
}

std::string CallKey(const std::string& type, const SlotArgs& in, const SlotArgs& out, const AttributeMap& attrs) {
  std::string key = type;
  auto add_slots = [&key](char tag, const SlotArgs& slots) {
    for (const auto& [slot, present] : slots) {
      key += tag;
      key += slot;
      key += ':';
      for (bool p : present) key += p ? '1' : '0';
    }
  };
  add_slots('\x1d', in);
  add_slots('\x1e', out);
  for (const auto& [name, value] : attrs) {
    key += '\x1f';
    key += name;
    key += '=';
    key += AttrToString(value);
  }
  return key;
}

}  // namespace

namespace detail_cache {
// Per thread: Call's prepared calls by op type, each matched on its slots,
// arities, attributes and output counts (no key string to build).
std::unordered_map<std::string, std::vector<std::unique_ptr<PreparedCall>>>& Forward() {
  thread_local std::unordered_map<std::string, std::vector<std::unique_ptr<PreparedCall>>> cache;
  return cache;
}
}  // namespace detail_cache

// ------------------------------------------------------------ defaults

Device& DefaultDevice() { return t_default_device ? *t_default_device : HostDevice(); }
void SetDefaultDevice(Device* device) { t_default_device = device; }

bool GradEnabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

namespace detail {

// ------------------------------------------------------------ TensorImpl

std::shared_ptr<TensorImpl> TensorImpl::Make(nabla::Tensor data, const std::string& name, bool requires_grad) {
  auto impl = MakePooled<TensorImpl>();
  impl->id = g_next_tensor_id.fetch_add(1, std::memory_order_relaxed);
  impl->data = std::move(data);
  impl->name = name;
  impl->requires_grad = requires_grad;
  if (requires_grad)
    NABLA_ENFORCE(IsFloating(impl->data.GetDType()), kInvalidArgument, "eager: tensor '", impl->Name(), "' is ",
                  DTypeName(impl->data.GetDType()), ": only float32 and float64 tensors can require grad");
  return impl;
}

nabla::Tensor Filled(const Shape& shape, DType dtype, Device& device, double value) {
  nabla::Tensor t;
  void* dst = t.Allocate(device, dtype, shape);
  const size_t n = static_cast<size_t>(t.Numel());
  std::vector<unsigned char> host(t.Bytes());
  auto fill = [&](auto v) {
    using T = decltype(v);
    T* p = reinterpret_cast<T*>(host.data());
    std::fill(p, p + n, v);
  };
  switch (dtype) {
    case DType::kFloat32:
      fill(static_cast<float>(value));
      break;
    case DType::kFloat64:
      fill(value);
      break;
    case DType::kInt32:
      fill(static_cast<int32_t>(value));
      break;
    case DType::kInt64:
      fill(static_cast<int64_t>(value));
      break;
    case DType::kBool:
      fill(value != 0);
      break;
    case DType::kBFloat16:
      fill(FloatToBf16(static_cast<float>(value)));
      break;
  }
  if (t.Bytes()) device.CopyFromHost(dst, host.data(), t.Bytes());
  return t;
}

// ------------------------------------------------------------ PreparedCall

namespace {
// Unbinds on every exit so the scope never keeps a caller's buffer alive.
struct UnbindOnExit {
  PreparedCall* call;
  ~UnbindOnExit() { call->Unbind(); }
};
}  // namespace

PreparedCall::PreparedCall(const std::string& type, const SlotArgs& in_args, const SlotArgs* out_args,
                           const AttributeMap& attrs, const OutputCounts& counts)
    : generation_(RegistryGeneration()), registry_(CurrentRegistry()), key_attrs_(attrs), key_counts_(counts) {
  const OpInfo& info = registry_->Get(type);
  const std::string where = StrCat("eager: op '", type, "'");
  NABLA_ENFORCE(!info.traits.control_flow && !info.traits.has_sub_block, kInvalidArgument, where,
                " runs sub-blocks; eager mode has no blocks: write the loop or branch in C++ (it is unrolled into "
                "the tape)");
  desc_.SetType(type);
  for (const auto& [slot, present] : in_args) {
    const SlotDef* def = info.schema.FindInput(slot);
    if (!def) {
      std::string names;
      for (const auto& s : info.schema.inputs) names += (names.empty() ? "" : ", ") + s.name;
      NABLA_THROW(kInvalidArgument, where, ": unknown input slot '", slot, "'; expected one of: ", names);
    }
    NABLA_ENFORCE(def->duplicable || present.size() <= 1, kInvalidArgument, where, ": input slot '", slot,
                  "' takes one tensor but received ", present.size());
    std::vector<std::string> args;
    for (size_t i = 0; i < present.size(); ++i)
      args.push_back(present[i] ? StrCat("in.", slot, ".", i) : kEmptyVarName);
    desc_.SetInput(slot, std::move(args));
    key_inputs_.emplace_back(slot, present.size());
  }
  for (const auto& def : info.schema.inputs) {
    bool given = std::any_of(in_args.begin(), in_args.end(), [&](const auto& s) {
      return s.first == def.name && std::find(s.second.begin(), s.second.end(), true) != s.second.end();
    });
    NABLA_ENFORCE(given || def.dispensable, kInvalidArgument, where, ": required input slot '", def.name,
                  "' was not given");
  }
  for (const auto& [slot, n] : counts) {
    const SlotDef* def = info.schema.FindOutput(slot);
    NABLA_ENFORCE(def, kInvalidArgument, where, ": output count for unknown output slot '", slot, "'");
    NABLA_ENFORCE(n >= 0 && (def->duplicable || n <= 1), kInvalidArgument, where, ": output slot '", slot,
                  "' cannot hold ", n, " tensors");
  }
  // Before the outputs: an op's output counts follow from its attributes.
  desc_.MutableAttrs() = attrs;
  FillDefaultAttrs(desc_, *registry_);
  // The checkers a program's verifier runs (dropout in [0, 1), say): once
  // per prepared call, not per run.
  VerifyOpAttrs(desc_, info.schema, where);
  if (out_args) {
    for (const auto& [slot, present] : *out_args) {
      NABLA_ENFORCE(info.schema.FindOutput(slot), kInvalidArgument, where, ": unknown output slot '", slot, "'");
      std::vector<std::string> args;
      for (size_t i = 0; i < present.size(); ++i)
        args.push_back(present[i] ? StrCat("out.", slot, ".", i) : kEmptyVarName);
      desc_.SetOutput(slot, std::move(args));
    }
  } else {
    for (const auto& def : info.schema.outputs) {
      auto it = counts.find(def.name);
      auto trait = info.output_counts.find(def.name);
      const int inferred = trait != info.output_counts.end() ? trait->second(desc_) : -1;
      int n = 1;
      if (it != counts.end()) {
        n = it->second;
        NABLA_ENFORCE(inferred < 0 || inferred == n, kInvalidArgument, where, ": output_counts gives output slot '",
                      def.name, "' ", n, " tensors, but the op's attributes and inputs make it ", inferred, "; leave '",
                      def.name, "' out of output_counts");
      } else if (inferred >= 0) {
        n = inferred;
      } else if (def.duplicable) {
        unsized_outputs_ += StrCat(unsized_outputs_.empty() ? "" : ", ", "'", def.name, "'");
      }
      std::vector<std::string> args;
      for (int i = 0; i < n; ++i) args.push_back(StrCat("out.", def.name, ".", i));
      desc_.SetOutput(def.name, std::move(args));
    }
  }

  // Slots in the desc's (sorted) order: callers pass tensors in that order.
  prepared_.op = &desc_;
  prepared_.info = &info;
  auto resolve = [this](const VarNameMap& slots) {
    std::vector<PreparedSlot> out;
    for (const auto& [slot, names] : slots) {
      PreparedSlot s{slot, {}};
      for (const auto& name : names) s.vars.push_back(name == kEmptyVarName ? nullptr : scope_.Var(name));
      out.push_back(std::move(s));
    }
    return out;
  };
  prepared_.inputs = resolve(desc_.Inputs());
  prepared_.outputs = resolve(desc_.Outputs());
  prepared_.CacheKernels(*registry_);
  prepared_.memo_sets_outputs = true;
  auto layout = std::make_shared<OutputLayout>();
  layout->type = type;
  for (const auto& slot : prepared_.outputs) {
    const SlotDef* def = info.schema.FindOutput(slot.name);
    layout->slots.push_back({slot.name, layout->total, slot.vars.size(), def != nullptr && def->duplicable});
    layout->total += slot.vars.size();
  }
  layout_ = std::move(layout);
}

bool PreparedCall::MatchesSlots(const SlotInput* slots, size_t n) const {
  if (n != key_inputs_.size()) return false;
  for (size_t s = 0; s < n; ++s)
    if (slots[s].size != key_inputs_[s].second || !PreparedOp::SameName(*slots[s].slot, key_inputs_[s].first))
      return false;
  return true;
}

bool PreparedCall::Matches(const SlotInput* slots, size_t n, const AttributeMap& attrs,
                           const OutputCounts& counts) const {
  return MatchesSlots(slots, n) && attrs == key_attrs_ && counts == key_counts_;
}

void PreparedCall::Unbind() {
  // Drops the buffers only: the shape vectors keep their capacity, so the
  // next bind copies a shape without allocating.
  for (auto* slots : {&prepared_.inputs, &prepared_.outputs})
    for (auto& s : *slots)
      for (Variable* v : s.vars)
        if (v) v->GetTensor().Release();
}

void PreparedCall::Dispatch(Device& device) {
  thread_local ExecutorOptions options;
  thread_local uint64_t run_index = 0;
  RunContext run;
  run.options = &options;
  run.run_index = run_index++;
  run.outputs_on_device = true;  // a call's results live on its inputs' device
  DispatchPrepared(prepared_, *registry_, scope_, device, run);
}

void PreparedCall::Run(const std::vector<std::vector<const nabla::Tensor*>>& inputs,
                       const std::vector<std::vector<nabla::Tensor*>>& outputs, Device& device) {
  UnbindOnExit unbind{this};
  for (size_t s = 0; s < prepared_.inputs.size(); ++s) {
    auto& vars = prepared_.inputs[s].vars;
    for (size_t i = 0; i < vars.size(); ++i)
      if (vars[i]) vars[i]->GetTensor() = *inputs[s][i];
  }
  for (size_t s = 0; s < prepared_.outputs.size(); ++s) {
    auto& vars = prepared_.outputs[s].vars;
    for (size_t i = 0; i < vars.size(); ++i)
      if (vars[i] && outputs[s][i] && outputs[s][i]->IsInitialized()) vars[i]->GetTensor() = *outputs[s][i];
  }
  Dispatch(device);
  for (size_t s = 0; s < prepared_.outputs.size(); ++s) {
    auto& vars = prepared_.outputs[s].vars;
    for (size_t i = 0; i < vars.size(); ++i)
      if (vars[i] && outputs[s][i]) *outputs[s][i] = std::move(vars[i]->GetTensor());
  }
}

void PreparedCall::RunEnv(std::vector<nabla::Tensor>& env, const std::vector<std::vector<int>>& in,
                          const std::vector<std::vector<int>>& out, Device& device) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  UnbindOnExit guard{this};
  for (size_t s = 0; s < prepared_.inputs.size(); ++s) {
    auto& vars = prepared_.inputs[s].vars;
    for (size_t i = 0; i < vars.size(); ++i)
      if (vars[i]) vars[i]->GetTensor() = env[in[s][i]];
  }
  Dispatch(device);
  for (size_t s = 0; s < prepared_.outputs.size(); ++s) {
    auto& vars = prepared_.outputs[s].vars;
    for (size_t i = 0; i < vars.size(); ++i)
      if (vars[i] && out[s][i] >= 0) env[out[s][i]] = std::move(vars[i]->GetTensor());
  }
}

std::shared_ptr<const GradTemplate> PreparedCall::Template(const std::vector<bool>& no_grad) {
  if (last_template_ && no_grad == last_no_grad_) return last_template_;
  auto it = templates_.find(no_grad);
  if (it == templates_.end()) it = templates_.emplace(no_grad, BuildGradTemplate(desc_, Info(), no_grad)).first;
  last_no_grad_ = no_grad;
  last_template_ = it->second;
  return it->second;
}

Outputs PreparedCall::Invoke(const SlotInput* slots, size_t n) {
  Device& device = CallDevice(desc_.Type(), slots, n);
  UnbindOnExit unbind{this};
  bool any_requires_grad = false;
  for (size_t s = 0; s < n; ++s) {
    auto& vars = prepared_.inputs[s].vars;
    for (size_t i = 0; i < slots[s].size; ++i) {
      const Tensor& t = slots[s].tensors[i];
      vars[i]->GetTensor() = t.Data();
      any_requires_grad = any_requires_grad || t.RequiresGrad();
    }
  }
  const bool record = any_requires_grad && GradEnabled();
  if (unsized_outputs_.empty()) {
    Dispatch(device);
  } else {
    try {
      Dispatch(device);
    } catch (const Error& e) {
      throw Error(e.kind(), StrCat(e.what(), " (eager: the op declares no count for duplicable output ",
                                   unsized_outputs_, ", so it got 1 tensor; give the count with output_counts)"));
    }
  }
  Outputs result;
  result.layout_ = layout_;
  if (layout_->total > 1) result.many_.reserve(layout_->total);
  for (auto& slot : prepared_.outputs) {
    for (Variable* v : slot.vars) {
      nabla::Tensor& data = v->GetTensor();
      const bool grad = record && data.IsInitialized() && IsFloating(data.GetDType());
      auto impl = MakePooled<TensorImpl>();
      impl->id = g_next_tensor_id.fetch_add(1, std::memory_order_relaxed);
      impl->data = std::move(data);
      impl->requires_grad = grad;
      result.Add(Tensor(std::move(impl)));
    }
  }
  if (record) {
    // Which args get no gradient: inputs that do not require it, outputs
    // that cannot have one (integer results).
    no_grad_.clear();
    in_handles_.clear();
    out_impls_.clear();
    for (size_t s = 0; s < n; ++s)
      for (size_t i = 0; i < slots[s].size; ++i) {
        const Tensor& t = slots[s].tensors[i];
        no_grad_.push_back(!t.RequiresGrad());
        in_handles_.push_back(&t);
      }
    for (size_t k = 0; k < result.n_; ++k) {
      const Tensor& o = result.Data()[k];
      no_grad_.push_back(!o.impl_->requires_grad);
      out_impls_.push_back(o.impl_);
    }
    detail::Record(Template(no_grad_), in_handles_, out_impls_);
    out_impls_.clear();  // holds no result past the call
  }
  return result;
}

PreparedCall& CachedCall(const std::string& type, const SlotArgs& in_args, const SlotArgs& out_args,
                         const AttributeMap& attrs) {
  thread_local std::unordered_map<std::string, std::unique_ptr<PreparedCall>> cache;
  const std::string key = CallKey(type, in_args, out_args, attrs);
  auto it = cache.find(key);
  if (it != cache.end() && !it->second->Stale()) return *it->second;
  auto call = std::make_unique<PreparedCall>(type, in_args, &out_args, attrs, OutputCounts{});
  PreparedCall& ref = *call;
  cache[key] = std::move(call);
  return ref;
}

nabla::Tensor SumInOrder(const std::vector<nabla::Tensor>& parts, Device& device) {
  NABLA_ENFORCE(!parts.empty(), kPreconditionNotMet, "eager: summing no gradients");
  if (parts.size() == 1) return parts[0];
  // The same convention op the static builder sums renamed gradients with
  // (docs/architecture.md).
  PreparedCall& call = CachedCall("sum", {{"X", std::vector<bool>(parts.size(), true)}}, {{"Out", {true}}}, {});
  std::vector<const nabla::Tensor*> xs;
  for (const auto& p : parts) xs.push_back(&p);
  nabla::Tensor out;
  call.Run({xs}, {{&out}}, device);
  return out;
}

}  // namespace detail

// ------------------------------------------------------------ Tensor

Tensor::Tensor() = default;
Tensor::~Tensor() = default;
Tensor::Tensor(const Tensor&) = default;
Tensor& Tensor::operator=(const Tensor&) = default;
Tensor::Tensor(Tensor&&) noexcept = default;
Tensor& Tensor::operator=(Tensor&&) noexcept = default;
Tensor::Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

const TensorImpl& Tensor::Impl(const char* what) const {
  NABLA_ENFORCE(impl_, kPreconditionNotMet, "eager: ", what, " of an undefined tensor");
  return *impl_;
}
TensorImpl& Tensor::MutableImpl(const char* what) {
  NABLA_ENFORCE(impl_, kPreconditionNotMet, "eager: ", what, " of an undefined tensor");
  return *impl_;
}

void Tensor::CheckCount(size_t count, const Shape& shape) {
  int64_t n = NumElements(shape);
  NABLA_ENFORCE(n >= 0 && static_cast<size_t>(n) == count, kInvalidArgument, "eager: shape ", ShapeToString(shape),
                " holds ", n, " elements but ", count, " values were given");
}

Tensor Tensor::FromHost(const void* data, DType dtype, const Shape& shape, bool requires_grad, const std::string& name,
                        Device* device) {
  int64_t n = NumElements(shape);
  NABLA_ENFORCE(n >= 0, kInvalidArgument, "eager: tensor '", name, "' has an unknown dim in ", ShapeToString(shape));
  Device& dev = device ? *device : DefaultDevice();
  nabla::Tensor t;
  void* dst = t.Allocate(dev, dtype, shape);
  if (t.Bytes()) dev.CopyFromHost(dst, data, t.Bytes());
  return Tensor(TensorImpl::Make(std::move(t), name, requires_grad));
}

Tensor Tensor::FromNpy(const std::string& path, bool requires_grad, const std::string& name, Device* device) {
  nabla::Tensor t = ReadNpy(path, device ? *device : DefaultDevice());
  std::string n = name.empty() ? std::filesystem::path(path).stem().string() : name;
  return Tensor(TensorImpl::Make(std::move(t), n, requires_grad));
}

Tensor Tensor::Init(const std::string& op_type, const Shape& shape, DType dtype, const AttributeMap& attrs,
                    bool requires_grad, const std::string& name) {
  AttributeMap a = attrs;
  std::vector<int> dims(shape.begin(), shape.end());
  if (!a.count("shape")) a["shape"] = dims;
  if (!a.count("dtype")) a["dtype"] = std::string(DTypeName(dtype));
  nabla::Tensor data = Call(op_type, {}, a)["Out"].Data();
  return Tensor(TensorImpl::Make(std::move(data), name, requires_grad));
}

Tensor Tensor::FromCore(const nabla::Tensor& data, bool requires_grad, const std::string& name) {
  NABLA_ENFORCE(data.IsInitialized(), kInvalidArgument, "eager: FromCore of a tensor with no data");
  return Tensor(TensorImpl::Make(data, name, requires_grad));
}

const Shape& Tensor::GetShape() const { return Impl("GetShape").data.GetShape(); }
DType Tensor::GetDType() const { return Impl("GetDType").data.GetDType(); }
int64_t Tensor::Numel() const { return Impl("Numel").data.Numel(); }
Device& Tensor::GetDevice() const {
  const TensorImpl& impl = Impl("GetDevice");
  NABLA_ENFORCE(impl.data.GetDevice(), kPreconditionNotMet, "eager: tensor '", impl.Name(), "' holds no data");
  return *impl.data.GetDevice();
}
// The "t<id>" default is what ToProgram, ToDot and messages call it too.
const std::string& Tensor::Name() const { return Impl("Name").Name(); }
void Tensor::SetName(const std::string& name) {
  NABLA_ENFORCE(!name.empty(), kInvalidArgument, "eager: a tensor name cannot be empty");
  MutableImpl("SetName").name = name;
}
const nabla::Tensor& Tensor::Data() const { return Impl("Data").data; }

void Tensor::CopyToHost(void* dst, DType expected) const {
  const TensorImpl& impl = Impl("CopyToHost");
  NABLA_ENFORCE(impl.data.GetDType() == expected, kInvalidArgument, "eager: tensor '", impl.name, "' is ",
                DTypeName(impl.data.GetDType()), ", not ", DTypeName(expected));
  if (impl.data.Bytes()) impl.data.GetDevice()->CopyToHost(dst, impl.data.RawData(), impl.data.Bytes());
}

void Tensor::WriteNpy(const std::string& path) const { nabla::WriteNpy(path, Impl("WriteNpy").data); }

std::string Tensor::ToString() const {
  if (!impl_) return "Tensor (undefined)";
  return StrCat("Tensor '", impl_->name, "' ", impl_->data.DebugString(), impl_->requires_grad ? " requires_grad" : "");
}

bool Tensor::RequiresGrad() const { return Impl("RequiresGrad").requires_grad; }
void Tensor::SetRequiresGrad(bool requires_grad) {
  TensorImpl& impl = MutableImpl("SetRequiresGrad");
  NABLA_ENFORCE(!impl.grad_fn, kInvalidArgument, "eager: SetRequiresGrad on '", impl.name,
                "', which a recorded call produced: only leaves set it (use Detach() for a new leaf)");
  NABLA_ENFORCE(!requires_grad || IsFloating(impl.data.GetDType()), kInvalidArgument, "eager: tensor '", impl.name,
                "' is ", DTypeName(impl.data.GetDType()), ": only float32 and float64 tensors can require grad");
  impl.requires_grad = requires_grad;
}
bool Tensor::IsLeaf() const { return !Impl("IsLeaf").grad_fn; }
Tensor Tensor::Grad() const {
  const TensorImpl& impl = Impl("Grad");
  return impl.grad ? Tensor(impl.grad) : Tensor();
}
void Tensor::ZeroGrad() { MutableImpl("ZeroGrad").grad.reset(); }
void Tensor::RetainGrad() {
  TensorImpl& impl = MutableImpl("RetainGrad");
  NABLA_ENFORCE(impl.requires_grad, kPreconditionNotMet, "eager: RetainGrad on '", impl.name,
                "', which does not require grad");
  impl.retain_grad = true;
}
void Tensor::Backward(bool retain_graph) const {
  Impl("Backward");
  detail::RunBackward(impl_, retain_graph);
}
Tensor Tensor::Detach() const {
  const TensorImpl& impl = Impl("Detach");
  auto d = TensorImpl::Make(impl.data, impl.name, false);
  d->version = impl_->SharedVersion();  // same data, same version counter
  return Tensor(d);
}
uint64_t Tensor::Version() const { return Impl("Version").VersionNow(); }

namespace {
void CheckInPlaceAllowed(const TensorImpl& impl, const char* what) {
  NABLA_ENFORCE(!(GradEnabled() && impl.requires_grad && !impl.grad_fn), kPreconditionNotMet, "eager: ", what,
                " writes '", impl.name,
                "' in place, a leaf that requires grad, while gradients are recorded; do it with gradients off "
                "(NoGradGuard in C++, nabla.no_grad() in Python)");
}
}  // namespace

void Tensor::CopyFrom(const Tensor& src) {
  TensorImpl& impl = MutableImpl("CopyFrom");
  const TensorImpl& s = src.Impl("CopyFrom (source)");
  CheckInPlaceAllowed(impl, "CopyFrom");
  NABLA_ENFORCE(s.data.GetShape() == impl.data.GetShape() && s.data.GetDType() == impl.data.GetDType(),
                kInvalidArgument, "eager: CopyFrom into '", impl.name, "' ", impl.data.DebugString(), " from '", s.name,
                "' ", s.data.DebugString(), ": shape and dtype must match");
  Device& dev = *impl.data.GetDevice();
  if (s.data.GetDevice() == &dev) {
    if (impl.data.Bytes()) dev.CopyOnDevice(impl.data.RawData(), s.data.RawData(), impl.data.Bytes());
  } else {
    std::vector<unsigned char> host(s.data.Bytes());
    if (!host.empty()) s.data.GetDevice()->CopyToHost(host.data(), s.data.RawData(), host.size());
    if (!host.empty()) dev.CopyFromHost(impl.data.RawData(), host.data(), host.size());
  }
  impl.SharedVersion()->fetch_add(1);
}

void Tensor::CopyFromHost(const void* data, DType dtype, const Shape& shape) {
  TensorImpl& impl = MutableImpl("CopyFromHost");
  CheckInPlaceAllowed(impl, "CopyFromHost");
  NABLA_ENFORCE(shape == impl.data.GetShape() && dtype == impl.data.GetDType(), kInvalidArgument,
                "eager: CopyFromHost into '", impl.name, "' ", impl.data.DebugString(), " of ", DTypeName(dtype),
                ShapeToString(shape), ": shape and dtype must match");
  if (impl.data.Bytes()) impl.data.GetDevice()->CopyFromHost(impl.data.RawData(), data, impl.data.Bytes());
  impl.SharedVersion()->fetch_add(1);
}

// ------------------------------------------------------------ Outputs

Outputs::Outputs() = default;
Outputs::~Outputs() = default;
Outputs::Outputs(const Outputs& o) : layout_(o.layout_), one_(o.one_), many_(o.many_), n_(o.n_) {}
Outputs& Outputs::operator=(const Outputs& o) {
  if (this != &o) {
    layout_ = o.layout_;
    one_ = o.one_;
    many_ = o.many_;
    n_ = o.n_;
    slots_.reset();
  }
  return *this;
}
Outputs::Outputs(Outputs&&) noexcept = default;
Outputs& Outputs::operator=(Outputs&&) noexcept = default;

size_t Outputs::NumSlots() const { return layout_ ? layout_->slots.size() : 0; }
const std::string& Outputs::SlotName(size_t i) const { return layout_->slots.at(i).name; }
const Tensor* Outputs::SlotData(size_t i) const { return Data() + layout_->slots.at(i).begin; }

void Outputs::Add(Tensor t) {
  if (n_ == 0 && many_.capacity() == 0) {
    one_ = std::move(t);
  } else {
    if (n_ == 1 && many_.empty()) many_.push_back(std::move(one_));
    many_.push_back(std::move(t));
  }
  ++n_;
}
size_t Outputs::SlotSize(size_t i) const { return layout_->slots.at(i).size; }
size_t Outputs::SlotIndex(const std::string& slot) const {
  const size_t n = NumSlots();
  for (size_t i = 0; i < n; ++i)
    if (layout_->slots[i].name == slot) return i;
  return n;
}

const std::string& Outputs::OpType() const {
  static const std::string none;
  return layout_ ? layout_->type : none;
}

bool Outputs::Has(const std::string& slot) const { return SlotIndex(slot) != NumSlots(); }

namespace {
[[noreturn]] void ThrowNoOutputSlot(const Outputs& out, const std::string& slot) {
  std::string names;
  for (size_t i = 0; i < out.NumSlots(); ++i) names += (names.empty() ? "" : ", ") + out.SlotName(i);
  NABLA_THROW(kNotFound, "eager: op '", out.OpType(), "' has no output slot '", slot, "'; it has: ", names);
}
}  // namespace

const Tensor& Outputs::operator[](const std::string& slot) const {
  const size_t i = SlotIndex(slot);
  if (i == NumSlots()) ThrowNoOutputSlot(*this, slot);
  const size_t n = layout_->slots[i].size;
  NABLA_ENFORCE(n == 1, kInvalidArgument, "eager: output slot '", slot, "' of op '", OpType(), "' holds ", n,
                " tensors; use List(\"", slot, "\")");
  return Data()[layout_->slots[i].begin];
}

const std::map<std::string, std::vector<Tensor>>& Outputs::Slots() const {
  if (!slots_) {
    auto m = std::make_unique<std::map<std::string, std::vector<Tensor>>>();
    for (size_t i = 0; i < NumSlots(); ++i) {
      const Tensor* d = SlotData(i);
      (*m)[SlotName(i)].assign(d, d + SlotSize(i));
    }
    slots_ = std::move(m);
  }
  return *slots_;
}

const std::vector<Tensor>& Outputs::List(const std::string& slot) const {
  if (!Has(slot)) ThrowNoOutputSlot(*this, slot);
  return Slots().at(slot);
}

bool Outputs::IsDuplicable(const std::string& slot) const {
  const size_t i = SlotIndex(slot);
  return i != NumSlots() && layout_->slots[i].duplicable;
}

// ------------------------------------------------------------ calls

Outputs Call(const std::string& type, const TensorMap& inputs, const AttributeMap& attrs,
             const OutputCounts& output_counts) {
  detail::SlotInputs slots(inputs);
  auto& entries = detail_cache::Forward()[type];
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (!(*it)->Matches(slots.data(), slots.size(), attrs, output_counts)) continue;
    if (!(*it)->Stale()) return (*it)->Invoke(slots.data(), slots.size());
    entries.erase(it);  // the registry changed: prepare again
    break;
  }
  entries.push_back(
      std::make_unique<PreparedCall>(type, InputArgs(slots.data(), slots.size(), type), nullptr, attrs, output_counts));
  return entries.back()->Invoke(slots.data(), slots.size());
}

void CallInPlace(const std::string& type, const TensorMap& inputs, const TensorMap& outputs,
                 const AttributeMap& attrs) {
  SlotArgs in_args = InputArgs(inputs, type), out_args = InputArgs(outputs, type);
  for (const auto* map : {&inputs, &outputs})
    for (const auto& [slot, tensors] : *map)
      for (const auto& t : tensors)
        NABLA_ENFORCE(!(GradEnabled() && t.RequiresGrad()), kPreconditionNotMet, "eager: CallInPlace of op '", type,
                      "' touches '", t.Name(),
                      "', which requires grad, while gradients are recorded; an in-place call is never recorded, so "
                      "run it with gradients off (NoGradGuard in C++, nabla.no_grad() in Python)");
  PreparedCall& call = detail::CachedCall(type, in_args, out_args, attrs);
  std::vector<std::vector<const nabla::Tensor*>> ins;
  for (const auto& [slot, tensors] : inputs) {
    ins.emplace_back();
    for (const auto& t : tensors) ins.back().push_back(&t.Data());
  }
  std::vector<std::vector<nabla::Tensor>> out_data;
  std::vector<std::vector<nabla::Tensor*>> outs;
  for (const auto& [slot, tensors] : outputs) {
    out_data.emplace_back();
    for (const auto& t : tensors) out_data.back().push_back(t.Data());
  }
  for (auto& v : out_data) {
    outs.emplace_back();
    for (auto& t : v) outs.back().push_back(&t);
  }
  call.Run(ins, outs, CallDevice(type, inputs));
  size_t s = 0;
  for (const auto& [slot, tensors] : outputs) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto& impl = *TensorImpl::Of(tensors[i]);
      impl.data = std::move(out_data[s][i]);
      impl.SharedVersion()->fetch_add(1);
    }
    ++s;
  }
}

// ------------------------------------------------------------ Op

Op::Op(const std::string& type, const AttributeMap& attrs, const OutputCounts& output_counts)
    : type_(type), attrs_(attrs), counts_(output_counts) {
  CurrentRegistry()->Get(type);  // an unknown type fails here, naming the plugins
}
Op::~Op() = default;
Op::Op(Op&&) noexcept = default;
Op& Op::operator=(Op&&) noexcept = default;
const std::string& Op::Type() const { return type_; }

Outputs Op::operator()(const TensorMap& inputs) const {
  detail::SlotInputs slots(inputs);
  return Run(slots.data(), slots.size());
}

Outputs Op::Run(const SlotInput* slots, size_t n) const {
  bool rebuild = !prepared_ || prepared_->Stale() || !prepared_->MatchesSlots(slots, n);
  if (rebuild) prepared_ = std::make_unique<PreparedCall>(type_, InputArgs(slots, n, type_), nullptr, attrs_, counts_);
  return prepared_->Invoke(slots, n);
}

}  // namespace nabla::eager
