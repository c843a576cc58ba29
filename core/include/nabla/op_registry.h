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
#include "nabla/gradcheck.h"
#include "nabla/program.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla {

class Device;
class Executor;
class Scope;
class Variable;

// ---------------------------------------------------------------- schema

enum SlotFlags : unsigned {
  kNone = 0,
  kDuplicable = 1u << 0,   // the slot takes a list of vars (sum's X)
  kDispensable = 1u << 1,  // the slot may be absent or empty
  kNoBuffer = 1u << 2,     // the kernel reads only the shape/dtype (grad ops)
  // The input gives an attribute's value at run time (a tensor-valued
  // attribute: reshape's Shape, scale's ScaleTensor). It never gets a
  // gradient: grad makers give it @EMPTY@ (GradOpDescMakerBase::InputGrad),
  // whatever its dtype, and DefaultGradOp declares no gradient slot for it.
  kNoGrad = 1u << 3,
};

struct SlotDef {
  std::string name;
  std::string doc;
  bool duplicable = false;
  bool dispensable = false;
  bool no_buffer = false;
  bool no_grad = false;  // kNoGrad
};

struct AttrDef {
  std::string name;
  AttrType type = AttrType::kInt;
  std::optional<Attribute> default_value;         // nullopt: the attribute is required
  std::function<void(const Attribute&)> checker;  // throws Error on a bad value
  std::string doc;
};

struct NABLA_API OpSchema {
  std::string type;
  std::string doc;
  std::vector<SlotDef> inputs;
  std::vector<SlotDef> outputs;
  std::vector<AttrDef> attrs;

  const SlotDef* FindInput(const std::string& name) const;
  const SlotDef* FindOutput(const std::string& name) const;
  const AttrDef* FindAttr(const std::string& name) const;
};

// How an op takes part in mixed precision (nabla/mixed_precision.h): the
// op declares it, so the pass that inserts casts names no op.
enum class OpPrecision {
  kFollowInputs,  // runs in the dtype its inputs come in (elementwise, shape ops)
  kLow,           // GEMM-bound, worth bfloat16 inputs (mul, matmul, conv2d); needs a bf16 kernel
  kFloat32,       // accuracy needs float32 (reductions, softmax, losses, norms, optimizers)
};
NABLA_API const char* OpPrecisionName(OpPrecision p);  // "follow_inputs", "low", "float32"

// What the backward builder and executors need to know about an op without
// knowing its name.
struct OpTraits {
  bool has_sub_block = false;  // set automatically when the schema has a block attr
  bool control_flow = false;   // runs blocks itself through ExecutionContext::RunBlock
  bool random = false;         // output depends on a seed
  // Reads or writes a tensor_array: a GradCheck case feeds dense tensors to
  // one op, so these ops have their gradients checked through programs.
  bool array_io = false;
  // A collective (allreduce, broadcast): every rank must run these in the
  // same order, so executors keep them in program order relative to each
  // other even where no var orders them (two collectives started in
  // different orders on two ranks deadlock).
  bool collective = false;
  // Writes an output that is also one of its inputs on purpose (an optimizer's
  // ParamOut, batch_norm's MeanOut): the backward builder's overwrite pass
  // leaves such writes alone instead of versioning or rejecting them.
  bool updates_in_place = false;
  // Converts X into Out of attribute out_dtype (from in_dtype): the op the
  // mixed-precision pass (nabla/mixed_precision.h) inserts.
  bool dtype_cast = false;
  OpPrecision precision = OpPrecision::kFollowInputs;
};

// A chain of ops that an op can replace (fusion, see nabla/fusion.h): the op
// types in program order, each linked to the next through the one of its
// outputs that the next reads and nothing else reads (its other outputs the
// fused op writes as it did). `fuse` builds the replacing op from the matched
// ops (same order), or returns null to leave that match alone. The op that
// declares the pattern knows the names; the core only matches them.
struct FusionPattern {
  std::vector<std::string> chain;
  std::function<std::unique_ptr<OpDesc>(const std::vector<const OpDesc*>& matched)> fuse;
};

// A rewrite an op brings for programs without their backward part (FuseOps,
// after the chains; OpBuilder::RewritesBeforeBackward), for what a chain
// cannot express: flash_attn replaces attention written with matmul and
// softmax, whose q, k and v come from transposes outside any chain. `run`
// follows FuseOps' rules: every var in `keep`, every persistable var and
// every result read later stays as it was; it returns how many places it
// changed. The fused ops bring their own gradients.
//
// A rewrite an op brings for programs that already hold their backward part
// and optimizer (FuseGradOps, nabla/fusion.h), for what a chain cannot
// express: grad ops of several forward ops that share work, say one operand
// computed once for all of them, or a grad op taking over the update of the
// weight it differentiates. `run` rewrites `program` in place and returns
// how many places it changed; it must leave every var in `keep`, every
// updated parameter and every other result the program computed as it was
// (a gradient only its update reads may go), and only change how the
// program computes them.
struct ProgramPass {
  std::string name;
  std::function<size_t(ProgramDesc& program, const std::unordered_set<std::string>& keep)> run;
};

struct NABLA_API Origin {
  std::string plugin;  // plugin name ("" for ops registered in-process)
  std::string path;    // plugin file
  std::string file;    // source file of the registration
  int line = 0;
  std::string ToString() const;  // "math_ops (…/libmath_ops.so) at mul_op.cc:42"
};

// ---------------------------------------------------------- inference

// Shape and dtype inference, at build time (over VarDescs, dims may be -1)
// and at run time (over tensors). One function serves both.
class NABLA_API InferShapeContext {
 public:
  virtual ~InferShapeContext();
  virtual const OpDesc& Op() const = 0;
  virtual bool IsRuntime() const = 0;
  // A slot is present when it has at least one argument that is not @EMPTY@.
  virtual bool HasInput(const std::string& slot) const = 0;
  virtual bool HasOutput(const std::string& slot) const = 0;
  virtual size_t InputSize(const std::string& slot) const = 0;
  virtual size_t OutputSize(const std::string& slot) const = 0;
  virtual Shape InputShape(const std::string& slot, size_t i = 0) const = 0;
  virtual DType InputDType(const std::string& slot, size_t i = 0) const = 0;
  virtual VarType InputVarType(const std::string& slot, size_t i = 0) const = 0;
  // Setting an @EMPTY@ output is a no-op.
  virtual void SetOutputShape(const std::string& slot, const Shape& shape, size_t i = 0) = 0;
  virtual void SetOutputDType(const std::string& slot, DType dtype, size_t i = 0) = 0;
  // Tensor-valued attributes: input slot[i] on the host (HostCopy), for a
  // shape function whose result depends on the values of a small input (a
  // shape, a count). Only at run time (IsRuntime()): at build time the value
  // is unknown and this throws, so callers leave the dims it decides at -1.
  // A run-time inference that reads values is never memoized.
  virtual Tensor InputHostTensor(const std::string& slot, size_t i = 0) const;

  template <typename T>
  const T& Attr(const std::string& name) const {
    return Op().Attr<T>(name);
  }
  // Out[i] gets the shape and dtype of In[j].
  void ShareShapeAndDType(const std::string& in, const std::string& out, size_t i = 0, size_t j = 0);
  // "op 'mul' (prog.yaml:3:7)": for messages.
  std::string Where() const;
  // The program the op belongs to, when known; lets Where() name the file.
  virtual const ProgramDesc* Program() const { return nullptr; }
};

using InferShapeFn = std::function<void(InferShapeContext&)>;
// Sets the VarType (and dtype where it is not a shape question) of outputs.
using InferVarTypeFn = std::function<void(const OpDesc& op, BlockDesc& block)>;

// ---------------------------------------------------------- grad makers

// Builds the grad ops of one forward op (seed 003). Helpers give the names a
// maker needs; a maker may return zero, one or several ops of any type.
class NABLA_API GradOpDescMakerBase {
 public:
  GradOpDescMakerBase(const OpDesc& fwd, const std::unordered_set<std::string>& no_grad_set,
                      std::unordered_map<std::string, std::string>* grad_to_var,
                      const std::vector<BlockDesc*>& grad_blocks);
  virtual ~GradOpDescMakerBase();
  virtual std::vector<std::unique_ptr<OpDesc>> operator()() const = 0;

 protected:
  const std::vector<std::string>& Input(const std::string& slot) const { return fwd_.Input(slot); }
  const std::vector<std::string>& Output(const std::string& slot) const { return fwd_.Output(slot); }
  // x@GRAD for every arg of the slot; @EMPTY@ for args in the no-grad set
  // and for every arg of a kNoGrad slot. Records grad -> forward var names
  // for the builder.
  std::vector<std::string> InputGrad(const std::string& slot) const;
  std::vector<std::string> OutputGrad(const std::string& slot) const;
  std::vector<std::string> InputSlots() const;
  std::vector<std::string> OutputSlots() const;
  // Whether the forward op's schema declares input `slot` kNoGrad.
  bool IsNoGradInput(const std::string& slot) const;
  const AttributeMap& Attrs() const { return fwd_.Attrs(); }
  template <typename T>
  const T& Attr(const std::string& name) const {
    return fwd_.Attr<T>(name);
  }
  const OpDesc& ForwardOp() const { return fwd_; }
  // The grad block built for the forward op's i-th sub-block (non-owning).
  BlockDesc* GradBlock(size_t i = 0) const;

 private:
  std::vector<std::string> GradNames(const std::vector<std::string>& names, bool is_input) const;

  const OpDesc& fwd_;
  const std::unordered_set<std::string>& no_grad_set_;
  std::unordered_map<std::string, std::string>* grad_to_var_;  // non-owning, may be null
  std::vector<BlockDesc*> grad_blocks_;
};

// `<type>_grad` with every forward input, output and output gradient as
// inputs (`X`, `Out`, `Out@GRAD`) and every input gradient as output (`X@GRAD`).
class NABLA_API DefaultGradOpDescMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override;
};

// For ops that deliberately have no gradient (accuracy, fill_constant, ...).
class NABLA_API EmptyGradOpDescMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override { return {}; }
};

using GradOpMakerFn = std::function<std::vector<std::unique_ptr<OpDesc>>(
    const OpDesc& fwd, const std::unordered_set<std::string>& no_grad_set,
    std::unordered_map<std::string, std::string>* grad_to_var, const std::vector<BlockDesc*>& grad_blocks)>;

// ---------------------------------------------------------- kernels

struct RunContext;
struct PreparedOp;

// What a kernel sees: its op, its tensors, its device.
class NABLA_API ExecutionContext {
 public:
  ExecutionContext(const OpDesc& op, Scope& scope, Device& device, const RunContext* run);
  // Variables come from `prepared` (resolved once per scope), not from names.
  ExecutionContext(const PreparedOp& prepared, Scope& scope, Device& device, const RunContext* run);

  const OpDesc& Op() const { return op_; }
  bool HasInput(const std::string& slot) const;
  bool HasOutput(const std::string& slot) const;
  size_t InputSize(const std::string& slot) const;
  size_t OutputSize(const std::string& slot) const;
  // The tensor of input `slot`[i]; an absent input is an error naming it.
  const Tensor& Input(const std::string& slot, size_t i = 0) const;
  // Null when the slot is absent or the arg is @EMPTY@ (a gradient nobody needs).
  Tensor* Output(const std::string& slot, size_t i = 0) const;
  std::vector<const Tensor*> MultiInput(const std::string& slot) const;
  std::vector<Tensor*> MultiOutput(const std::string& slot) const;
  // Input slot[i] readable on the host (HostCopy): tensor-valued
  // attributes, read by kernels of any device as shape inference reads them.
  Tensor InputHostTensor(const std::string& slot, size_t i = 0) const;
  Variable* InputVar(const std::string& slot, size_t i = 0) const;
  Variable* OutputVar(const std::string& slot, size_t i = 0) const;
  template <typename T>
  const T& Attr(const std::string& name) const {
    // A prepared op's attributes without the map's string compares (a
    // kernel reads some on every call); a miss or a wrong type takes the
    // OpDesc's path, which reports it.
    if (const Attribute* a = PreparedAttr(name))
      if (const T* v = std::get_if<T>(a)) return *v;
    return op_.Attr<T>(name);
  }

  Device& GetDevice() const { return device_; }
  Scope& GetScope() const { return scope_; }
  const RunContext* Run() const { return run_; }
  // Runs block `block_idx` of the running program in `scope` (control flow).
  void RunBlock(int block_idx, Scope& scope) const;
  // The op's `seed` attribute when non-zero, else one derived from the run's
  // seed and this op, so seeded runs are reproducible.
  uint64_t Seed() const;

 private:
  const OpDesc& op_;
  Scope& scope_;
  Device& device_;
  const RunContext* run_;                 // non-owning, may be null
  const PreparedOp* prepared_ = nullptr;  // non-owning, may be null

  const Attribute* PreparedAttr(const std::string& name) const;
};

using KernelFn = std::function<void(const ExecutionContext&)>;
// Picks the dtype a kernel is looked up by; default: the first input tensor.
using KernelDTypeFn = std::function<DType(const ExecutionContext&)>;

struct KernelInfo {
  KernelFn fn;
  Origin origin;
  std::shared_ptr<void> library;  // keeps the plugin mapped while callable
};

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
  std::shared_ptr<void> library;            // keeps the plugin mapped while callable
  std::vector<GradCheckSpec> grad_checks;   // cases for `nabla gradcheck`
  std::vector<FusionPattern> fusions;       // chains this op replaces (FuseOps)
  std::vector<ProgramPass> forward_passes;  // rewrites before the backward part (FuseOps)
  std::vector<ProgramPass> grad_passes;     // rewrites after the backward part (FuseGradOps)

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
  OpBuilder& Precision(OpPrecision p);  // sets traits.precision
  // This op may replace a chain of ops (see FusionPattern and FuseOps).
  OpBuilder& Fuses(FusionPattern pattern);
  // This op brings a rewrite for programs with their backward part (see
  // ProgramPass and FuseGradOps).
  OpBuilder& RewritesAfterBackward(ProgramPass pass);
  // This op brings a rewrite for programs without their backward part, run by
  // FuseOps after the chains (see ProgramPass).
  OpBuilder& RewritesBeforeBackward(ProgramPass pass);
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
