#include "nabla/train/weights.h"

#include "nabla/error.h"
#include "nabla/train/checkpoint.h"

namespace nabla::train {

int LoadWeights(const std::string& path, const ProgramDesc& program, Scope& scope, Device& device) {
  SafetensorsFile file = ReadSafetensors(path);
  const BlockDesc& root = *program.Root();
  for (const auto& [name, t] : file.tensors) {
    const VarDesc* var = root.FindVar(name);
    NABLA_ENFORCE(var != nullptr, kNotFound, "--weights ", path, ": tensor '", name, "' names no var of block 0 in ",
                  program.SourceFile());
    NABLA_ENFORCE(var->Persistable(), kInvalidArgument, "--weights ", path, ": var '", name,
                  "' is not persistable (feed data with --feed)");
    NABLA_ENFORCE(t.GetDType() == var->GetDType(), kInvalidArgument, "--weights ", path, ": tensor '", name, "' is ",
                  DTypeName(t.GetDType()), " but the var is ", DTypeName(var->GetDType()));
    const Shape& want = var->GetShape();
    bool fits = want.size() == t.GetShape().size();
    for (size_t i = 0; fits && i < want.size(); ++i) fits = want[i] < 0 || want[i] == t.GetShape()[i];
    NABLA_ENFORCE(fits, kInvalidArgument, "--weights ", path, ": tensor '", name, "' has shape ",
                  ShapeToString(t.GetShape()), " but the var is declared ", ShapeToString(want));
  }
  for (const auto& [name, t] : file.tensors) {
    Tensor& dst = scope.Var(name)->GetTensor();
    dst.CopyFrom(t, device);
  }
  return static_cast<int>(file.tensors.size());
}

}  // namespace nabla::train
