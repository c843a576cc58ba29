#pragma once
// The OpInfoMap: what the core knows about an op, all of it registered by a
// plugin. Schema (slots, typed attributes with defaults and checkers), shape
// and var-type inference, the GradOpDescMaker, traits, origin, and kernels
// keyed by (op type, device, dtype).
//
// Worked example, one op in one file of a plugin:
//
//   NABLA_REGISTER_OPS(scale) {
//     registrar.Op("scale", __FILE__, __LINE__)
//         .Doc("Out = scale * X + bias")
//         .Input("X", "(Tensor) input")
//         .Output("Out", "(Tensor) output, shape of X")
//         .Attr<float>("scale", 1.0f, "(float, default 1.0) the factor")
//         .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
//         .GradMaker<ScaleGradMaker>();
//     registrar.Kernel("scale", DeviceType::kCPU, DType::kFloat32, ScaleKernel<float>, __FILE__, __LINE__);
//   }
//
// Split by concern; this header is the registry and includes the parts:
//   nabla/op_schema.h       slots, attributes, traits, origin
//   nabla/infer_shape.h     InferShapeContext
//   nabla/grad_maker.h      GradOpDescMakerBase and the standard makers
//   nabla/kernel_context.h  ExecutionContext, KernelFn, KernelInfo
// Plugins on the C ABI see none of these: nabla/c_api.h and nabla/sdk/.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/error.h"
#include "nabla/export.h"
#include "nabla/grad_maker.h"
#include "nabla/gradcheck.h"
#include "nabla/infer_shape.h"
#include "nabla/kernel_context.h"
#include "nabla/op_schema.h"
#include "nabla/program.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla {

class Device;
class Executor;
class Scope;
class Variable;

// How many tensors a duplicable output slot holds, decided from the op desc
// before it runs: its attributes (schema defaults filled in) and the args of
// its input slots (split: `num`, `sections` or one part per tensor of
// SectionsTensorList). -1 when they do not tell. Front-ends that are not
// given the outputs (eager calls, Python's nabla.ops) size the slot with it
// unless the caller passed output_counts.
using OutputCountFn = std::function<int(const OpDesc& op)>;

struct OpInfo {
  OpSchema schema;
  InferShapeFn infer_shape;
  InferVarTypeFn infer_var_type;
  GradOpMakerFn grad_maker;  // null: the op has no gradient (an error if one is needed)
  // GradMaker<EmptyGradOpDescMaker>(): the op declares it has no gradient, so
  // the backward builder passes it by while `nabla ops` and gradcheck say "no".
  bool declares_no_gradient = false;
  KernelDTypeFn kernel_dtype;
  OpTraits traits;
  Origin origin;
  std::shared_ptr<void> library;                       // keeps the plugin mapped while callable
  std::vector<GradCheckSpec> grad_checks;              // cases for `nabla gradcheck`
  std::vector<FusionPattern> fusions;                  // chains this op replaces (FuseOps)
  std::vector<ProgramPass> forward_passes;             // rewrites before the backward part (FuseOps)
  std::vector<ProgramPass> grad_passes;                // rewrites after the backward part (FuseGradOps)
  std::map<std::string, OutputCountFn> output_counts;  // by duplicable output slot

  // A maker was registered (possibly the empty one): the backward builder may pass the op.
  bool HasGradMaker() const { return static_cast<bool>(grad_maker); }
  // The op has a gradient: a maker that is not EmptyGradOpDescMaker.
  bool HasGradient() const { return HasGradMaker() && !declares_no_gradient; }
};

// ---------------------------------------------------------- the registry

// An immutable snapshot. Loading a plugin builds a new one and publishes it in
// one swap, so readers never see a half-registered plugin.
class NABLA_API OpRegistry {
 public:
  const OpInfo* Find(const std::string& type) const;
  // Throws NotFound naming the type and the loaded plugins.
  const OpInfo& Get(const std::string& type) const;
  const KernelInfo* FindKernel(const std::string& type, DeviceType device, DType dtype) const;
  std::vector<std::pair<DeviceType, DType>> KernelsOf(const std::string& type) const;
  std::vector<std::string> OpTypes() const;  // sorted

  struct PluginRecord {
    std::string name, path, abi;
    std::vector<std::string> ops;
  };
  const std::vector<PluginRecord>& Plugins() const { return plugins_; }

 private:
  friend class RegistryTransaction;
  std::unordered_map<std::string, OpInfo> ops_;
  std::map<std::tuple<std::string, DeviceType, DType>, KernelInfo> kernels_;
  std::vector<PluginRecord> plugins_;
};

NABLA_API std::shared_ptr<const OpRegistry> CurrentRegistry();

class OpBuilder;

// The staging area a plugin (or a test) registers into. Nothing it holds is
// visible until the whole batch validates and is published.
class NABLA_API Registrar {
 public:
  Registrar();
  ~Registrar();
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  OpBuilder& Op(const std::string& type, const char* file = "", int line = 0);
  // A grad op whose slots follow DefaultGradOpDescMaker for `fwd_type` (which
  // must be registered in the same batch): X, Out, Out@GRAD -> X@GRAD, with
  // the forward attributes.
  OpBuilder& DefaultGradOp(const std::string& fwd_type, const char* file = "", int line = 0);
  void Kernel(const std::string& type, DeviceType device, DType dtype, KernelFn fn, const char* file = "",
              int line = 0);

  struct Impl;
  Impl& GetImpl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
  std::vector<std::unique_ptr<OpBuilder>> builders_;  // stable addresses for the returned builders
};

class NABLA_API OpBuilder {
 public:
  explicit OpBuilder(OpInfo* info) : info_(info) {}
  OpBuilder& Doc(std::string doc);
  OpBuilder& Input(std::string name, std::string doc, unsigned flags = kNone);
  OpBuilder& Output(std::string name, std::string doc, unsigned flags = kNone);
  template <typename T>
  OpBuilder& Attr(std::string name, T default_value, std::string doc, std::function<void(const T&)> checker = nullptr) {
    return AddAttr(std::move(name), AttrTypeOf<T>::value, Attribute(std::move(default_value)), std::move(doc),
                   WrapChecker(std::move(checker)));
  }
  template <typename T>
  OpBuilder& RequiredAttr(std::string name, std::string doc, std::function<void(const T&)> checker = nullptr) {
    return AddAttr(std::move(name), AttrTypeOf<T>::value, std::nullopt, std::move(doc),
                   WrapChecker(std::move(checker)));
  }
  OpBuilder& InferShape(InferShapeFn fn);
  OpBuilder& InferVarType(InferVarTypeFn fn);
  OpBuilder& GradMaker(GradOpMakerFn fn);
  template <typename Maker>
  OpBuilder& GradMaker() {
    GradMaker([](const OpDesc& fwd, const std::unordered_set<std::string>& no_grad,
                 std::unordered_map<std::string, std::string>* g2v,
                 const std::vector<BlockDesc*>& blocks) { return Maker(fwd, no_grad, g2v, blocks)(); });
    info_->declares_no_gradient = std::is_same_v<Maker, EmptyGradOpDescMaker>;
    return *this;
  }
  OpBuilder& KernelDType(KernelDTypeFn fn);
  OpBuilder& GradCheck(GradCheckSpec spec);
  OpBuilder& ControlFlow();
  OpBuilder& Random();
  OpBuilder& ArrayIO();                 // sets traits.array_io
  OpBuilder& Collective();              // sets traits.collective
  OpBuilder& UpdatesInPlace();          // sets traits.updates_in_place
  OpBuilder& DTypeCast();               // sets traits.dtype_cast
  OpBuilder& MovesData();               // sets traits.moves_data
  OpBuilder& Precision(OpPrecision p);  // sets traits.precision
  // Input slots, declared before, that its bfloat16 kernel also takes in
  // float32 (adds to traits.bf16_float32_inputs): that kernel must read
  // each of them in either dtype.
  OpBuilder& Bf16TakesFloat32(std::vector<std::string> slots);
  // This op may replace a chain of ops (see FusionPattern and FuseOps).
  OpBuilder& Fuses(FusionPattern pattern);
  // This op brings a rewrite for programs with their backward part (see
  // ProgramPass and FuseGradOps).
  OpBuilder& RewritesAfterBackward(ProgramPass pass);
  // This op brings a rewrite for programs without their backward part, run by
  // FuseOps after the chains (see ProgramPass).
  OpBuilder& RewritesBeforeBackward(ProgramPass pass);
  // How many tensors the duplicable output `slot` (declared before) holds,
  // from the attributes and inputs (see OutputCountFn).
  OpBuilder& OutputCount(const std::string& slot, OutputCountFn fn);
  // Marks input `slot` (declared before, e.g. by DefaultGradOp) no-buffer:
  // the kernel reads its shape and dtype only (kNoBuffer).
  OpBuilder& NoBufferInput(const std::string& slot);
  OpInfo& Info() { return *info_; }

 private:
  template <typename T>
  static std::function<void(const nabla::Attribute&)> WrapChecker(std::function<void(const T&)> c) {
    if (!c) return nullptr;
    return [c](const nabla::Attribute& a) { c(std::get<T>(a)); };
  }
  OpBuilder& AddAttr(std::string name, AttrType type, std::optional<Attribute> def, std::string doc,
                     std::function<void(const nabla::Attribute&)> checker);
  OpInfo* info_;  // non-owning: lives in the Registrar's staging area
};

// Registers ops from in-process code (tests, the app) as one transaction,
// exactly like a plugin named `origin`. Throws on any problem; the registry
// is then unchanged.
NABLA_API void RegisterOps(const std::string& origin, const std::function<void(Registrar&)>& fn);

// Schema defaults for every attribute the op does not set; unknown or
// ill-typed attributes are errors naming the op.
NABLA_API void FillDefaultAttrs(OpDesc& op, const OpRegistry& registry, const ProgramDesc* program = nullptr);
// Runs var-type then shape inference of one op at build time, creating its
// output vars in `block` when absent.
NABLA_API void InferOpAtBuildTime(const OpDesc& op, BlockDesc& block, const OpRegistry& registry);
// Checks every op against its schema: known type, known slots, required
// slots present, arity of non-duplicable slots, attribute types, inputs
// defined (declared or produced earlier), sub-block indices valid.
NABLA_API void VerifyProgram(const ProgramDesc& program, const OpRegistry& registry);

}  // namespace nabla
