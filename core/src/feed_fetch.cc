#include "nabla/feed_fetch.h"

#include <unordered_set>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/types.h"

namespace nabla {
namespace {

std::string DeclaredAt(const ProgramDesc& program, const VarDesc& var) {
  std::string where = program.Where(var.Pos());
  return where.empty() ? std::string() : " (declared at " + where + ")";
}

bool ShapeMatches(const Shape& declared, const Shape& actual) {
  if (declared.size() != actual.size()) return false;
  for (size_t i = 0; i < declared.size(); ++i) {
    if (declared[i] != -1 && declared[i] != actual[i]) return false;
  }
  return true;
}

}  // namespace

void CheckFeedMatchesVar(const ProgramDesc& program, const VarDesc& var, const Tensor& t, const std::string& source) {
  const std::string& name = var.Name();
  NABLA_ENFORCE(!var.HasDType() || var.GetDType() == t.GetDType(), kInvalidArgument, source, " has dtype ",
                DTypeName(t.GetDType()), " but var '", name, "' is declared ", DTypeName(var.GetDType()),
                DeclaredAt(program, var));
  NABLA_ENFORCE(ShapeMatches(var.GetShape(), t.GetShape()), kInvalidArgument, source, " has shape ",
                ShapeToString(t.GetShape()), " but var '", name, "' is declared with shape ",
                ShapeToString(var.GetShape()), DeclaredAt(program, var));
}

void CheckInputsProvided(const ProgramDesc& program, const Scope& scope,
                         const std::function<std::string(const std::string&)>& how_to_feed) {
  const BlockDesc& root = *program.Root();
  std::unordered_set<std::string> produced;
  for (const auto& op : root.AllOps()) {
    for (const std::string& name : op->InputArgumentNames()) {
      if (name == kEmptyVarName || produced.count(name)) continue;
      const VarDesc* var = root.FindVar(name);
      if (var == nullptr || !var->Declared() || var->Type() != VarType::kDense) continue;
      const Variable* v = scope.FindVar(name);
      const std::string where = program.Where(op->Pos());
      NABLA_ENFORCE(v != nullptr && v->GetTensor().IsInitialized(), kInvalidArgument, where, where.empty() ? "" : ": ",
                    "op '", op->Type(), "' reads var '", name, "' but nothing provides it: ", how_to_feed(name),
                    var->Persistable() ? " or give it an init: spec" : "");
    }
    for (const std::string& name : op->OutputArgumentNames()) produced.insert(name);
  }
}

Tensor FetchToHost(const ProgramDesc& program, const Scope& scope, const std::string& name, const std::string& what) {
  const Variable* v = scope.FindVar(name);
  NABLA_ENFORCE(v != nullptr && v->Type() == VarType::kDense && v->GetTensor().IsInitialized(), kPreconditionNotMet,
                what, ": the run of ", program.SourceFile().empty() ? "the program" : program.SourceFile(),
                " left no tensor in var '", name, "' (no op of block 0 writes it and it was not fed)");
  const Tensor& t = v->GetTensor();
  Tensor host;
  if (t.GetDevice() == &HostDevice()) {
    host.ShareDataWith(t);
  } else {
    host.CopyFrom(t, HostDevice());
  }
  return host;
}

}  // namespace nabla
