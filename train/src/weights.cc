#include "nabla/train/weights.h"

#include "nabla/error.h"
#include "nabla/train/checkpoint.h"

namespace nabla::train {

void CheckWeights(const std::map<std::string, Tensor>& tensors, const ProgramDesc& program, const std::string& what) {
  const BlockDesc& root = *program.Root();
  for (const auto& [name, t] : tensors) {
    const VarDesc* var = root.FindVar(name);
    NABLA_ENFORCE(var != nullptr, kNotFound, what, ": tensor '", name, "' names no var of block 0",
                  program.SourceFile().empty() ? "" : " in ", program.SourceFile());
    NABLA_ENFORCE(var->Persistable(), kInvalidArgument, what, ": var '", name,
                  "' is not persistable: data is fed, not loaded as weights");
    NABLA_ENFORCE(t.GetDType() == var->GetDType(), kInvalidArgument, what, ": tensor '", name, "' is ",
                  DTypeName(t.GetDType()), " but the var is ", DTypeName(var->GetDType()));
    const Shape& want = var->GetShape();
    bool fits = want.size() == t.GetShape().size();
    for (size_t i = 0; fits && i < want.size(); ++i) fits = want[i] < 0 || want[i] == t.GetShape()[i];
    NABLA_ENFORCE(fits, kInvalidArgument, what, ": tensor '", name, "' has shape ", ShapeToString(t.GetShape()),
                  " but the var is declared ", ShapeToString(want));
  }
}

int LoadWeights(const std::string& path, const ProgramDesc& program, Scope& scope, Device& device) {
  SafetensorsFile file = ReadSafetensors(path);
  CheckWeights(file.tensors, program, "--weights " + path);
  for (const auto& [name, t] : file.tensors) {
    Tensor& dst = scope.Var(name)->GetTensor();
    dst.CopyFrom(t, device);
  }
  return static_cast<int>(file.tensors.size());
}

}  // namespace nabla::train
