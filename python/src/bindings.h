#pragma once
// The parts of the _nabla extension module, each binding one half of the
// Python API (docs/python.md).
#include <pybind11/pybind11.h>

namespace nabla::python {

void BindStatic(pybind11::module_& m);
void BindEager(pybind11::module_& m);
void BindTrain(pybind11::module_& m);

}  // namespace nabla::python
