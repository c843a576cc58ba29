// Build-time shape, dtype and var-type inference over VarDescs, and schema
// defaults for attributes. Run by the loader after parsing and by every pass
// that adds ops, so the program always carries what can be known before run
// time (unknown dims are -1).
#include <string>
#include <utility>

#include "dtype_not_known.h"
#include "nabla/op_registry.h"
#include "nabla/program_io.h"
#include "plugin_call.h"
#include "source_pos.h"

namespace nabla {

void InferShapeContext::ShareShapeAndDType(const std::string& in, const std::string& out, size_t i, size_t j) {
  SetOutputShape(out, InputShape(in, j), i);
  SetOutputDType(out, InputDType(in, j), i);
}

Tensor InferShapeContext::InputHostTensor(const std::string& slot, size_t i) const {
  NABLA_THROW(kPreconditionNotMet, Where(), ": the values of input ", slot, "[", i,
              "] are known only at run time, but shape inference asked for them at build time");
}

std::string InferShapeContext::Where() const {
  std::string s = "op '" + Op().Type() + "'";
  const SourcePos& p = Op().Pos();
  if (p.line <= 0) return s;
  // Without the program (a context that does not know it) the file is
  // unknown; line and column still find the op.
  std::string pos = Program() ? internal::PosString(Program(), p) : StrCat(p.line, ":", p.col);
  return s + " (" + pos + ")";
}

namespace {

using internal::DTypeNotKnownYet;  // dtype_not_known.h

std::string JoinAttrNames(const OpSchema& schema) {
  std::string s;
  for (const AttrDef& a : schema.attrs) s += (s.empty() ? "" : ", ") + a.name;
  return s.empty() ? "(none)" : s;
}

class BuildTimeInferShapeContext final : public InferShapeContext {
 public:
  BuildTimeInferShapeContext(const OpDesc& op, BlockDesc& block) : op_(op), block_(block) {}

  const OpDesc& Op() const override { return op_; }
  bool IsRuntime() const override { return false; }
  const ProgramDesc* Program() const override { return block_.Program(); }

  bool HasInput(const std::string& slot) const override { return AnyPresent(op_.Input(slot)); }
  bool HasOutput(const std::string& slot) const override { return AnyPresent(op_.Output(slot)); }
  size_t InputSize(const std::string& slot) const override { return op_.Input(slot).size(); }
  size_t OutputSize(const std::string& slot) const override { return op_.Output(slot).size(); }

  Shape InputShape(const std::string& slot, size_t i) const override { return InputVar(slot, i).GetShape(); }
  DType InputDType(const std::string& slot, size_t i) const override {
    const VarDesc& v = InputVar(slot, i);
    if (!v.HasDType()) throw DTypeNotKnownYet{};
    return v.GetDType();
  }
  VarType InputVarType(const std::string& slot, size_t i) const override { return InputVar(slot, i).Type(); }

  void SetOutputShape(const std::string& slot, const Shape& shape, size_t i) override {
    if (VarDesc* v = OutputVar(slot, i)) v->SetShape(shape);
  }
  void SetOutputDType(const std::string& slot, DType dtype, size_t i) override {
    if (VarDesc* v = OutputVar(slot, i)) {
      v->SetDType(dtype);
      v->MarkDTypeKnown(true);
    }
  }

 private:
  static bool AnyPresent(const std::vector<std::string>& args) {
    for (const std::string& a : args)
      if (a != kEmptyVarName) return true;
    return false;
  }

  const VarDesc& InputVar(const std::string& slot, size_t i) const {
    const std::vector<std::string>& args = op_.Input(slot);
    NABLA_ENFORCE(i < args.size(), kInvalidArgument, Where(), ": input ", slot, "[", i,
                  "] is missing: expected at least ", i + 1, " argument(s) in slot '", slot, "' but received ",
                  args.size());
    NABLA_ENFORCE(args[i] != kEmptyVarName, kInvalidArgument, Where(), ": input ", slot, "[", i,
                  "] is needed by shape inference: expected a var but received ", kEmptyVarName);
    const VarDesc* v = block_.FindVarRecursive(args[i]);
    NABLA_ENFORCE(v, kNotFound, Where(), ": input ", slot, "[", i, "] '", args[i],
                  "' is not defined: expected a var declared in block ", block_.Idx(),
                  " or its parents, or produced by an earlier op");
    return *v;
  }

  // Null for @EMPTY@: a gradient nobody needs has no var.
  VarDesc* OutputVar(const std::string& slot, size_t i) {
    const std::vector<std::string>& args = op_.Output(slot);
    NABLA_ENFORCE(i < args.size(), kInvalidArgument, Where(), ": output ", slot, "[", i,
                  "] is missing: expected at least ", i + 1, " argument(s) in slot '", slot, "' but received ",
                  args.size());
    if (args[i] == kEmptyVarName) return nullptr;
    VarDesc* v = block_.FindVarRecursive(args[i]);
    return v ? v : block_.Var(args[i]);
  }

  const OpDesc& op_;
  BlockDesc& block_;
};

// Shape functions name the op with InferShapeContext::Where(), "op 'mul'
// (f.yaml:3:7): ...". Messages must start with the position, so that prefix
// is rewritten to "f.yaml:3:7: op 'mul': ..."; anything else gets the
// position and op prepended.
[[noreturn]] void RethrowPositioned(const Error& e, const BuildTimeInferShapeContext& ctx) {
  std::string pos = internal::PosString(ctx.Program(), ctx.Op().Pos());
  std::string msg = e.what();
  if (pos.empty() || msg.rfind(pos, 0) == 0) throw e;
  std::string where = ctx.Where();
  std::string head = pos + ": op '" + ctx.Op().Type() + "'";
  if (msg.rfind(where, 0) == 0) {
    msg = head + msg.substr(where.size());
  } else {
    msg = head + ": shape inference failed: " + msg;
  }
  throw Error(e.kind(), msg);
}

}  // namespace

void FillDefaultAttrs(OpDesc& op, const OpRegistry& registry, const ProgramDesc* program) {
  const std::string where = internal::PosPrefix(program, op.Pos()) + "op '" + op.Type() + "'";
  const OpInfo* info = registry.Find(op.Type());
  NABLA_ENFORCE(info, kNotFound, where,
                ": unknown op type: expected an op registered by a loaded plugin but received '", op.Type(), "'");
  const OpSchema& schema = info->schema;
  for (const auto& [name, value] : op.Attrs()) {
    const AttrDef* def = schema.FindAttr(name);
    NABLA_ENFORCE(def, kInvalidArgument, where, ": unknown attribute: expected one of ", JoinAttrNames(schema),
                  " but received '", name, "'");
    NABLA_ENFORCE(TypeOf(value) == def->type, kInvalidArgument, where, ": attribute '", name,
                  "' has the wrong type: expected ", AttrTypeName(def->type), " but received ",
                  AttrTypeName(TypeOf(value)), " ", AttrToString(value));
  }
  for (const AttrDef& def : schema.attrs) {
    if (op.HasAttr(def.name)) continue;
    NABLA_ENFORCE(def.default_value.has_value(), kInvalidArgument, where, ": required attribute '", def.name,
                  "' is missing: expected a value of type ", AttrTypeName(def.type), " but received none");
    op.SetAttr(def.name, *def.default_value);
  }
}

void InferOpAtBuildTime(const OpDesc& op, BlockDesc& block, const OpRegistry& registry) {
  const OpInfo* info = registry.Find(op.Type());
  NABLA_ENFORCE(info, kNotFound, internal::PosPrefix(block.Program(), op.Pos()), "op '", op.Type(),
                "': unknown op type: expected an op registered by a loaded plugin but received '", op.Type(), "'");
  // Outputs nobody declared live in the op's own block; a name found in a
  // parent block is that var (a sub-block updating a loop variable).
  for (const auto& [slot, args] : op.Outputs()) {
    for (const std::string& a : args) {
      if (a != kEmptyVarName && !block.FindVarRecursive(a)) block.Var(a);
    }
  }
  BuildTimeInferShapeContext ctx(op, block);
  try {
    if (info->infer_var_type) info->infer_var_type(op, block);
    if (info->infer_shape) info->infer_shape(ctx);
  } catch (const DTypeNotKnownYet&) {
    // Left unknown on purpose; see DTypeNotKnownYet.
  } catch (const Error& e) {
    RethrowPositioned(e, ctx);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    RethrowPositioned(Error(ErrorKind::kRuntime,
                            StrCat(internal::PluginLabel(info->origin), " threw from shape inference: ", e.what())),
                      ctx);
  } catch (...) {
    RethrowPositioned(Error(ErrorKind::kRuntime, StrCat(internal::PluginLabel(info->origin),
                                                        " threw a non-standard exception (not derived from "
                                                        "std::exception) from shape inference")),
                      ctx);
  }
}

void InferProgram(ProgramDesc& program) {
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  for (size_t b = 0; b < program.Size(); ++b) {
    BlockDesc* block = program.Block(b);
    // By index: var-type inference may add vars, never ops, but stay safe.
    for (size_t i = 0; i < block->OpSize(); ++i) InferOpAtBuildTime(*block->Op(i), *block, *registry);
  }
}

}  // namespace nabla
