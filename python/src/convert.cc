#include "convert.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <type_traits>
#include <variant>

#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"

namespace nabla::python {

std::string TypeName(const py::handle& obj) { return py::str(py::type::of(obj).attr("__name__")); }

Device& ResolveDevice(const std::string& spec, const std::string& where) {
  try {
    return ::nabla::ResolveDevice(spec);
  } catch (const Error& e) {
    throw Error(e.kind(), where + ": " + e.what());
  }
}

namespace {

bool IsInteger(const py::handle& obj) {
  return !py::isinstance<py::bool_>(obj) && (py::isinstance<py::int_>(obj) || py::hasattr(obj, "__index__"));
}

template <typename T>
T ScalarAttr(const py::handle& obj, AttrType type, const std::string& where) {
  const std::string got = TypeName(obj);
  switch (type) {
    case AttrType::kInt:
    case AttrType::kBlock:
      NABLA_ENFORCE(IsInteger(obj), kInvalidArgument, where, ": expected an int but received ", got);
      break;
    case AttrType::kFloat:
      NABLA_ENFORCE(IsInteger(obj) || py::isinstance<py::float_>(obj) || py::hasattr(obj, "__float__"),
                    kInvalidArgument, where, ": expected a float but received ", got);
      break;
    case AttrType::kBool:
      NABLA_ENFORCE(py::isinstance<py::bool_>(obj) || got == "bool_", kInvalidArgument, where,
                    ": expected a bool but received ", got);
      break;
    case AttrType::kString:
      NABLA_ENFORCE(py::isinstance<py::str>(obj), kInvalidArgument, where, ": expected a str but received ", got);
      break;
    default:
      break;
  }
  if constexpr (std::is_same_v<T, int>) {
    const long long v = py::int_(py::reinterpret_borrow<py::object>(obj));
    NABLA_ENFORCE(v >= INT32_MIN && v <= INT32_MAX, kOutOfRange, where, ": ", v, " does not fit an int attribute");
    return static_cast<int>(v);
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(py::float_(py::reinterpret_borrow<py::object>(obj)));
  } else if constexpr (std::is_same_v<T, bool>) {
    return py::bool_(py::reinterpret_borrow<py::object>(obj));
  } else {
    return py::cast<std::string>(obj);
  }
}

template <typename T>
std::vector<T> ListAttr(const py::handle& obj, AttrType elem, const std::string& where) {
  NABLA_ENFORCE(py::isinstance<py::sequence>(obj) && !py::isinstance<py::str>(obj), kInvalidArgument, where,
                ": expected a list but received ", TypeName(obj));
  std::vector<T> out;
  for (const py::handle& item : obj) out.push_back(ScalarAttr<T>(item, elem, where));
  return out;
}

}  // namespace

Attribute AttrFromPython(const py::handle& obj, AttrType type, const std::string& where) {
  switch (type) {
    case AttrType::kInt:
      return ScalarAttr<int>(obj, type, where);
    case AttrType::kFloat:
      return ScalarAttr<float>(obj, type, where);
    case AttrType::kString:
      return ScalarAttr<std::string>(obj, type, where);
    case AttrType::kBool:
      return ScalarAttr<bool>(obj, type, where);
    case AttrType::kInts:
      return ListAttr<int>(obj, AttrType::kInt, where);
    case AttrType::kFloats:
      return ListAttr<float>(obj, AttrType::kFloat, where);
    case AttrType::kStrings:
      return ListAttr<std::string>(obj, AttrType::kString, where);
    case AttrType::kBools:
      return ListAttr<bool>(obj, AttrType::kBool, where);
    case AttrType::kBlock:
      return BlockRef{ScalarAttr<int>(obj, type, where)};
  }
  NABLA_THROW(kInvalidArgument, where, ": unknown attribute type");
}

py::object AttrToPython(const Attribute& a) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, BlockRef>) {
          return py::int_(v.idx);
        } else {
          return py::cast(v);
        }
      },
      a);
}

AttributeMap AttrsFromPython(const py::handle& attrs, const OpSchema& schema, const std::string& where,
                             const std::unordered_set<std::string>& skip) {
  AttributeMap out;
  if (attrs.is_none()) return out;
  NABLA_ENFORCE(py::isinstance<py::dict>(attrs), kInvalidArgument, where, ": attrs must be a dict but received ",
                TypeName(attrs));
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(attrs)) {
    const std::string name = py::str(key);
    if (skip.count(name)) continue;
    const AttrDef* def = schema.FindAttr(name);
    if (def == nullptr) {
      std::string known;
      for (const AttrDef& a : schema.attrs) known += (known.empty() ? "" : ", ") + a.name;
      NABLA_THROW(kInvalidArgument, where, ": op '", schema.type, "' has no attribute '", name,
                  "' (it has: ", known.empty() ? "none" : known, ")");
    }
    out[name] = AttrFromPython(value, def->type, where + ": attribute '" + name + "'");
  }
  return out;
}

}  // namespace nabla::python
