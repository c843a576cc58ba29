#pragma once
// Tensors as text for the terminal, in NumPy's style: nested brackets, one
// row per line, long axes summarised with "...".
#include <string>

#include "nabla/tensor.h"

namespace nabla::app {

// `tensor` must live in host memory.
std::string FormatTensor(const Tensor& tensor);

}  // namespace nabla::app
