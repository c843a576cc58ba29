#pragma once
// `--weights FILE.safetensors` (nabla exec, nabla run): persistable vars set
// from a safetensors file, an ONNX import's weights or any checkpoint.
#include <map>
#include <string>

#include "nabla/device.h"
#include "nabla/program.h"
#include "nabla/scope.h"

namespace nabla::train {

// Every tensor in the file must name a persistable var of block 0 whose
// dtype it has and whose declared shape it fits (-1 dims match any size);
// vars the file does not name keep their values. Every tensor is checked
// before the first var is set. Returns how many vars were set.
int LoadWeights(const std::string& path, const ProgramDesc& program, Scope& scope, Device& device);

// LoadWeights' checks on tensors from anywhere (nabla.onnx.save's weights):
// errors start with `what` ("--weights FILE").
void CheckWeights(const std::map<std::string, Tensor>& tensors, const ProgramDesc& program, const std::string& what);

}  // namespace nabla::train
