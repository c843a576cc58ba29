#include <algorithm>
#include <cctype>

#include "nabla/plugin.h"
#include "registry_internal.h"

namespace nabla {

Origin Registrar::Impl::MakeOrigin(const char* file, int line) const {
  return Origin{plugin_name, plugin_path, file ? file : "", line};
}

Registrar::Registrar() : impl_(std::make_unique<Impl>()) {}
Registrar::~Registrar() = default;

// Op types are identifiers (Paddle's names: conv2d, lookup_table_v2): they
// key programs, `nabla.ops.<type>` in Python and generated code. So do
// device names, in `--device NAME:N`.
bool IsIdentifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

OpBuilder& Registrar::Op(const std::string& type, const char* file, int line) {
  if (!IsIdentifier(type))
    impl_->problems.push_back(StrCat("op type '", type, "' (", impl_->MakeOrigin(file, line).ToString(),
                                     ") is not a valid op name: expected letters, digits and '_', not starting ",
                                     "with a digit (like conv2d or lookup_table_v2)"));
  auto& slot = impl_->ops[type];
  if (slot) {
    impl_->problems.push_back(StrCat("op '", type, "' registered twice in the same plugin (", slot->origin.ToString(),
                                     " and ", impl_->MakeOrigin(file, line).ToString(), ")"));
  } else {
    slot = std::make_unique<OpInfo>();
    impl_->op_order.push_back(type);
  }
  slot->schema.type = type;
  slot->origin = impl_->MakeOrigin(file, line);
  builders_.push_back(std::make_unique<OpBuilder>(slot.get()));
  return *builders_.back();
}

OpBuilder& Registrar::DefaultGradOp(const std::string& fwd_type, const char* file, int line) {
  std::string grad_type = fwd_type + "_grad";
  auto it = impl_->ops.find(fwd_type);
  OpBuilder& b = Op(grad_type, file, line);
  if (it == impl_->ops.end()) {
    impl_->problems.push_back(StrCat("DefaultGradOp('", fwd_type, "') at ", impl_->MakeOrigin(file, line).ToString(),
                                     ": the forward op must be registered first in the same plugin"));
    return b;
  }
  const OpSchema& fwd = it->second->schema;
  unsigned opt = kDispensable;
  b.Doc(StrCat("Gradient of ", fwd_type, " (made by DefaultGradOpDescMaker)."));
  for (const auto& s : fwd.inputs) b.Input(s.name, s.doc, (s.duplicable ? kDuplicable : 0u) | opt);
  for (const auto& s : fwd.outputs) {
    b.Input(s.name, s.doc, (s.duplicable ? kDuplicable : 0u) | opt);
    b.Input(s.name + kGradSuffix, "gradient of " + s.name, (s.duplicable ? kDuplicable : 0u) | opt);
  }
  for (const auto& s : fwd.inputs) {
    if (s.no_grad) continue;
    b.Output(s.name + kGradSuffix, "gradient of " + s.name, (s.duplicable ? kDuplicable : 0u) | opt);
    // One gradient per forward input of the slot.
    if (s.duplicable)
      b.OutputCount(s.name + kGradSuffix,
                    [name = s.name](const OpDesc& op) { return static_cast<int>(op.Input(name).size()); });
  }
  for (const auto& a : fwd.attrs) b.Info().schema.attrs.push_back(a);
  for (const auto& a : fwd.attrs)
    if (a.type == AttrType::kBlock) b.Info().traits.has_sub_block = true;
  return b;
}

void Registrar::Kernel(const std::string& type, DeviceType device, DType dtype, KernelFn fn, const char* file,
                       int line) {
  impl_->kernels.emplace_back(std::make_tuple(type, device, dtype),
                              KernelInfo{std::move(fn), impl_->MakeOrigin(file, line), nullptr});
}

// ------------------------------------------------------------ OpBuilder

OpBuilder& OpBuilder::Doc(std::string doc) {
  info_->schema.doc = std::move(doc);
  return *this;
}

static SlotDef MakeSlot(std::string name, std::string doc, unsigned flags) {
  SlotDef s;
  s.name = std::move(name);
  s.doc = std::move(doc);
  s.duplicable = (flags & kDuplicable) != 0;
  s.dispensable = (flags & kDispensable) != 0;
  s.no_buffer = (flags & kNoBuffer) != 0;
  s.no_grad = (flags & kNoGrad) != 0;
  return s;
}

OpBuilder& OpBuilder::Input(std::string name, std::string doc, unsigned flags) {
  info_->schema.inputs.push_back(MakeSlot(std::move(name), std::move(doc), flags));
  return *this;
}

OpBuilder& OpBuilder::Output(std::string name, std::string doc, unsigned flags) {
  info_->schema.outputs.push_back(MakeSlot(std::move(name), std::move(doc), flags));
  return *this;
}

OpBuilder& OpBuilder::AddAttr(std::string name, AttrType type, std::optional<Attribute> def, std::string doc,
                              std::function<void(const nabla::Attribute&)> checker) {
  if (type == AttrType::kBlock) info_->traits.has_sub_block = true;
  info_->schema.attrs.push_back(AttrDef{std::move(name), type, std::move(def), std::move(checker), std::move(doc)});
  return *this;
}

OpBuilder& OpBuilder::InferShape(InferShapeFn fn) {
  info_->infer_shape = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::InferVarType(InferVarTypeFn fn) {
  info_->infer_var_type = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::GradMaker(GradOpMakerFn fn) {
  info_->grad_maker = std::move(fn);
  info_->declares_no_gradient = false;
  return *this;
}
OpBuilder& OpBuilder::KernelDType(KernelDTypeFn fn) {
  info_->kernel_dtype = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::GradCheck(GradCheckSpec spec) {
  info_->grad_checks.push_back(std::move(spec));
  return *this;
}
OpBuilder& OpBuilder::ControlFlow() {
  info_->traits.control_flow = true;
  return *this;
}
OpBuilder& OpBuilder::Random() {
  info_->traits.random = true;
  return *this;
}
OpBuilder& OpBuilder::Collective() {
  info_->traits.collective = true;
  return *this;
}
OpBuilder& OpBuilder::ArrayIO() {
  info_->traits.array_io = true;
  return *this;
}
OpBuilder& OpBuilder::UpdatesInPlace() {
  info_->traits.updates_in_place = true;
  return *this;
}
OpBuilder& OpBuilder::DTypeCast() {
  info_->traits.dtype_cast = true;
  return *this;
}
OpBuilder& OpBuilder::MovesData() {
  info_->traits.moves_data = true;
  return *this;
}

OpBuilder& OpBuilder::Precision(OpPrecision p) {
  info_->traits.precision = p;
  return *this;
}

OpBuilder& OpBuilder::Bf16TakesFloat32(std::vector<std::string> slots) {
  std::vector<std::string>& marked = info_->traits.bf16_float32_inputs;
  for (std::string& slot : slots) {
    NABLA_ENFORCE(info_->schema.FindInput(slot) != nullptr, kInvalidArgument, "op '", info_->schema.type,
                  "': Bf16TakesFloat32('", slot, "') needs an input slot of that name declared before it");
    if (std::find(marked.begin(), marked.end(), slot) == marked.end()) marked.push_back(std::move(slot));
  }
  return *this;
}

const char* OpPrecisionName(OpPrecision p) {
  switch (p) {
    case OpPrecision::kFollowInputs:
      return "follow_inputs";
    case OpPrecision::kLow:
      return "low";
    case OpPrecision::kFloat32:
      return "float32";
  }
  return "?";
}
OpBuilder& OpBuilder::OutputCount(const std::string& slot, OutputCountFn fn) {
  const SlotDef* def = info_->schema.FindOutput(slot);
  NABLA_ENFORCE(def != nullptr && def->duplicable && fn, kInvalidArgument, "op '", info_->schema.type,
                "': OutputCount('", slot, "') needs a duplicable output slot declared before it and a function");
  info_->output_counts[slot] = std::move(fn);
  return *this;
}

OpBuilder& OpBuilder::NoBufferInput(const std::string& slot) {
  for (SlotDef& s : info_->schema.inputs) {
    if (s.name != slot) continue;
    s.no_buffer = true;
    return *this;
  }
  NABLA_THROW(kInvalidArgument, "op '", info_->schema.type, "': NoBufferInput('", slot,
              "') needs an input slot of that name declared before it");
}

OpBuilder& OpBuilder::Fuses(FusionPattern pattern) {
  NABLA_ENFORCE(pattern.chain.size() >= 2 && pattern.fuse, kInvalidArgument, "op '", info_->schema.type,
                "': a fusion pattern needs at least two op types and a fuse function");
  info_->fusions.push_back(std::move(pattern));
  return *this;
}

OpBuilder& OpBuilder::RewritesAfterBackward(ProgramPass pass) {
  NABLA_ENFORCE(!pass.name.empty() && pass.run, kInvalidArgument, "op '", info_->schema.type,
                "': a program pass needs a name and a run function");
  info_->grad_passes.push_back(std::move(pass));
  return *this;
}

OpBuilder& OpBuilder::RewritesBeforeBackward(ProgramPass pass) {
  NABLA_ENFORCE(!pass.name.empty() && pass.run, kInvalidArgument, "op '", info_->schema.type,
                "': a program pass needs a name and a run function");
  info_->forward_passes.push_back(std::move(pass));
  return *this;
}

// ------------------------------------------------------------ transactions

void RegisterOps(const std::string& origin, const std::function<void(Registrar&)>& fn) {
  Registrar r;
  r.GetImpl().plugin_name = origin;
  try {
    fn(r);
  } catch (const std::exception& e) {
    r.GetImpl().registration_error = e.what();
  }
  CommitRegistrar(r);
}

namespace plugin_detail {
int RunRegistrations(Registrar* registrar, const std::vector<RegisterFn>& fns) noexcept {
  try {
    for (RegisterFn fn : fns) fn(*registrar);
    return 0;
  } catch (const std::exception& e) {
    registrar->GetImpl().registration_error = e.what();
  } catch (...) {
    registrar->GetImpl().registration_error = "an exception that is not a std::exception";
  }
  return 1;
}
}  // namespace plugin_detail

}  // namespace nabla
