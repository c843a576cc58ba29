#pragma once
// Tensor-valued attribute inputs (Paddle's reshape Shape/ShapeTensor, slice
// StartsTensor, scale ScaleTensor, ...): an optional input that, when given,
// holds an attribute's value at run time, so a program can compute a shape
// or a rate while it runs. One helper per kind of value, called by shape
// inference and kernels alike: at build time a value that comes from an
// input is unknown (nullopt; the dims it decides stay -1), at run time it is
// read on the host (InputHostTensor), so kernels of every device read it the
// same way. Such inputs are declared with kTensorAttrInput or
// kTensorAttrListInput: dispensable, and never given a gradient.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"

namespace nabla::opkit {

// The helpers, written once for this op kit and the C ABI SDK's.
#include "nabla/sdk/attr_tensor.inc"  // IWYU pragma: export

}  // namespace nabla::opkit
