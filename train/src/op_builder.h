#pragma once
// Appends ops to a program's root block as a program file would declare
// them: the op must be registered, default attributes are filled in and
// output shapes inferred at once, so the next op sees them.
#include <memory>
#include <string>

#include "nabla/op_registry.h"
#include "nabla/program.h"

namespace nabla::train {

class OpBuilder {
 public:
  explicit OpBuilder(ProgramDesc& program);

  OpDesc* Append(const std::string& type, VarNameMap inputs, VarNameMap outputs, AttributeMap attrs = {});
  // A persistable var filled once by the startup program; its name must be free.
  void FilledVar(const std::string& name, const Shape& shape, DType dtype, float value);
  bool OpHasOutput(const std::string& type, const std::string& slot) const;
  BlockDesc& Block() const { return *block_; }

 private:
  ProgramDesc& program_;
  BlockDesc* block_;  // non-owning: program_'s root block
  std::shared_ptr<const OpRegistry> registry_;
};

}  // namespace nabla::train
