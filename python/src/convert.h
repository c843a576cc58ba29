#pragma once
// Python values -> typed op attributes, shared by the static half
// (Program.append_op) and the eager half (nabla.call, nabla.ops.*).
#include <pybind11/pybind11.h>

#include <string>
#include <unordered_set>

#include "nabla/attribute.h"
#include "nabla/op_registry.h"

namespace nabla {
class Device;
}  // namespace nabla

namespace nabla::python {

namespace py = pybind11;

// NAME or NAME:N of a registered device backend ("cpu", "opencl:1", "null"),
// as the CLI takes them (nabla/device_registry.h); anything else is an error
// starting with `where`. Shared by Executor(device=), nabla.tensor(device=) and
// set_default_device.
Device& ResolveDevice(const std::string& spec, const std::string& where);

// "float", "ndarray", ...: for messages.
std::string TypeName(const py::handle& obj);

// One value as an attribute of `type`; ints pass as floats, nothing else is
// converted. `where` starts the message.
Attribute AttrFromPython(const py::handle& obj, AttrType type, const std::string& where);
py::object AttrToPython(const Attribute& a);

// A dict {name: value} typed by the op's schema; an unknown name is an error
// listing the attributes the op has. None is an empty map.
AttributeMap AttrsFromPython(const py::handle& attrs, const OpSchema& schema, const std::string& where,
                             const std::unordered_set<std::string>& skip = {});

}  // namespace nabla::python
