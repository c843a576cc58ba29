#include "op_builder.h"

#include "nabla/error.h"
#include "nabla/train.h"

namespace nabla::train {

OpBuilder::OpBuilder(ProgramDesc& program) : program_(program), block_(program.Root()), registry_(CurrentRegistry()) {}

OpDesc* OpBuilder::Append(const std::string& type, VarNameMap inputs, VarNameMap outputs, AttributeMap attrs) {
  registry_->Get(type);  // a NotFound naming the loaded plugins when the op is missing
  auto op = std::make_unique<OpDesc>(type, std::move(inputs), std::move(outputs), std::move(attrs));
  FillDefaultAttrs(*op, *registry_, &program_);
  OpDesc* p = block_->AppendOp(std::move(op));
  InferOpAtBuildTime(*p, *block_, *registry_);
  return p;
}

void OpBuilder::FilledVar(const std::string& name, const Shape& shape, DType dtype, float value) {
  NABLA_ENFORCE(!block_->HasVar(name), kAlreadyExists, "the optimizer needs a var named '", name,
                "', but the program already has one");
  DeclareFilledVar(*block_, name, shape, dtype, value);
}

bool OpBuilder::OpHasOutput(const std::string& type, const std::string& slot) const {
  return registry_->Get(type).schema.FindOutput(slot) != nullptr;
}

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
