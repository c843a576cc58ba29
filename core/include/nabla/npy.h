#pragma once
// NumPy .npy files: C order, little endian; float32, float64, int32, int64,
// bool. Errors name the file and what is wrong with it.
#include <string>

#include "nabla/export.h"
#include "nabla/tensor.h"

namespace nabla {

class Device;

NABLA_API Tensor ReadNpy(const std::string& path, Device& device);
// Writes atomically: on failure nothing is left at `path`.
NABLA_API void WriteNpy(const std::string& path, const Tensor& tensor);

}  // namespace nabla
