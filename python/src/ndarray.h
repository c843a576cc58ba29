#pragma once
// NumPy arrays <-> nabla tensors without copies where the layout allows:
// a C-contiguous, aligned, native-endian array of float32, float64, int32,
// int64 or bool becomes a tensor over the array's own memory (the tensor
// keeps the array alive), and a host tensor becomes an array over the
// tensor's buffer (the array keeps the buffer alive).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::python {

namespace py = pybind11;

// `what` names the value in errors ("feed 'x'"). Anything np.asarray takes is
// accepted; an array of another dtype is an error naming both dtypes.
Tensor TensorFromArray(const py::handle& obj, const std::string& what);

// An array sharing the tensor's buffer (copied to the host first when the
// tensor lives on another device).
py::array ArrayFromTensor(const Tensor& tensor);

py::dtype NumpyDType(DType dtype);
std::string DTypeString(DType dtype);

}  // namespace nabla::python
