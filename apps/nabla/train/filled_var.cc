#include "train/filled_var.h"

namespace nabla::train {

VarDesc* DeclareFilledVar(BlockDesc& block, const std::string& name, const Shape& shape, DType dtype, float value) {
  VarDesc* v = block.Var(name);
  v->SetShape(shape);
  v->SetDType(dtype);
  v->MarkDTypeKnown();
  v->SetPersistable(true);
  v->SetStopGradient(true);
  v->SetDeclared(true);
  InitSpec init;
  init.type = "fill_constant";
  init.attrs["value"] = value;
  v->SetInit(init);
  return v;
}

}  // namespace nabla::train
