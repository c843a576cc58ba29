#pragma once
// A persistable, no-gradient var the startup program fills with one value:
// what the programs training adds (learning rate, optimizer moments, the
// data-parallel gradient scale) declare, in one place.
#include <string>

#include "nabla/program.h"

namespace nabla::train {

VarDesc* DeclareFilledVar(BlockDesc& block, const std::string& name, const Shape& shape, DType dtype, float value);

}  // namespace nabla::train
