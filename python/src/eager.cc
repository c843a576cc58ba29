// The eager half of the Python API (docs/python.md) over nabla/eager.h: nabla.Tensor with NumPy in
// and out, arithmetic operators mapped to the elementwise ops, nabla.call,
// no_grad and the Tape. nabla.ops.* is generated in Python from the registry
// and goes through _call.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/eager.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/program.h"
#include "ndarray.h"

namespace nabla::python {
namespace {

using eager::Tensor;

// ------------------------------------------------------------ fast paths
// pybind11's own call path (type lookups by hashed type name, argument
// loaders, a method object and an args tuple per operator) cost more than
// the op (issue 34: 16k instructions per op against PyTorch's 8.8k). The
// per-op entry points (the arithmetic operators and nabla.ops.<type> called
// with tensors) are CPython slots that find the C++ objects directly; the
// rest of the API stays pybind11's.

PyTypeObject* g_tensor_type = nullptr;
const py::detail::type_info* g_tensor_info = nullptr;

// The C++ object of a pybind11 instance of `info`'s type or a Python subclass.
void* CppObject(PyObject* o, const py::detail::type_info* info) {
  auto* inst = reinterpret_cast<py::detail::instance*>(o);
  if (inst->simple_layout) return inst->simple_value_holder[0];
  return inst->get_value_and_holder(info, false).value_ptr();
}

// The Tensor in `o`, or null when `o` is no (initialised) nabla.Tensor.
Tensor* AsTensor(PyObject* o) {
  if (Py_TYPE(o) != g_tensor_type && !PyType_IsSubtype(Py_TYPE(o), g_tensor_type)) return nullptr;
  return static_cast<Tensor*>(CppObject(o, g_tensor_info));
}

// A new Python object owning `t` (a new reference).
PyObject* ToPy(Tensor t) {
  return py::detail::type_caster_generic::cast(new Tensor(std::move(t)), py::return_value_policy::take_ownership,
                                               py::handle(), g_tensor_info, nullptr, nullptr)
      .ptr();
}

// Runs f, turning a C++ exception into the Python one pybind11's
// translators (module.cc's for nabla::Error) would raise.
template <typename F>
PyObject* Guarded(F&& f) {
  try {
    return f();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (...) {
    if (py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators))
      return nullptr;
    if (py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators))
      return nullptr;
    PyErr_SetString(PyExc_SystemError, "nabla: an exception escaped the exception translators");
    return nullptr;
  }
}

// Host data stays shared; on another device it is copied there once.
nabla::Tensor OnDevice(nabla::Tensor t, Device& device) {
  if (t.GetDevice() == &device || (t.GetDevice() == nullptr && &device == &HostDevice())) return t;
  nabla::Tensor copy;
  copy.CopyFrom(t, device);
  return copy;
}

// ndarrays and Python scalars share their memory with the tensor where the
// layout allows (ndarray.h); a scalar becomes a one-element tensor of the
// other operand's dtype when there is one. They go to the other operand's
// device, else the default device.
Tensor ToTensor(const py::handle& obj, const std::string& what, const Tensor* like = nullptr) {
  if (Tensor* t = AsTensor(obj.ptr())) return *t;
  Device& device = like != nullptr ? like->GetDevice() : eager::DefaultDevice();
  if (like != nullptr && (py::isinstance<py::float_>(obj) || py::isinstance<py::int_>(obj))) {
    py::array a = py::array(NumpyDType(like->GetDType()), std::vector<py::ssize_t>{1});
    a[py::int_(0)] = obj;
    return Tensor::FromCore(OnDevice(TensorFromArray(a, what), device));
  }
  return Tensor::FromCore(OnDevice(TensorFromArray(obj, what), device));
}

// A Python tensor's name: nabla.tensor(name=None) leaves the core's "t<id>".
// device=None: a Tensor keeps its device, an ndarray goes to the default one.
Tensor MakeTensor(const py::handle& data, bool requires_grad, const py::object& name, const py::object& device) {
  const std::string n = name.is_none() ? std::string() : py::cast<std::string>(py::str(name));
  Device* target = nullptr;
  if (!device.is_none()) {
    NABLA_ENFORCE(py::isinstance<py::str>(device), kInvalidArgument,
                  "nabla.tensor: device must be a str (NAME or NAME:N, as `nabla devices` lists them) but received ",
                  TypeName(device));
    target = &ResolveDevice(py::cast<std::string>(device), "nabla.tensor");
  }
  if (py::isinstance<Tensor>(data)) {
    // nabla.tensor(t): a new leaf over the same data, as torch.tensor(t).detach().
    Tensor t = py::cast<Tensor>(data).Detach();
    nabla::Tensor core = t.Data();
    if (target != nullptr) core = OnDevice(core, *target);
    return Tensor::FromCore(core, requires_grad, n);
  }
  nabla::Tensor core = TensorFromArray(data, "nabla.tensor");
  return Tensor::FromCore(OnDevice(core, target != nullptr ? *target : eager::DefaultDevice()), requires_grad, n);
}

// The spec ResolveDevice takes back, by the device type's registered name:
// "cpu" and "null" have one device each, any other backend is "NAME:N".
std::string DeviceSpec(const Device& d) {
  const std::string name = DeviceTypeName(d.Type());
  return d.Type() == DeviceType::kCPU || IsDryRun(d) ? name : StrCat(name, ":", d.Id());
}

py::object OutputsToPython(const eager::Outputs& out) {
  py::dict d;
  for (const auto& [slot, tensors] : out.Slots()) {
    if (out.IsDuplicable(slot)) {
      d[py::str(slot)] = py::cast(tensors);
    } else if (!tensors.empty()) {
      d[py::str(slot)] = py::cast(tensors.front());
    }
  }
  return d;
}

// A call's inputs given as ndarrays or numbers are made on the default
// device; they then go to the device of its first Tensor input, so that
// nabla.ops.f(t_on_opencl, labels_ndarray) runs on OpenCL.
class ConvertedInputs {
 public:
  // Appends `value` (a Tensor, an ndarray, a number, or a list of them for a
  // duplicable slot) to in[slot].
  void Add(eager::TensorMap& in, const std::string& slot, const py::handle& value, const std::string& what) {
    std::vector<Tensor>& list = in[slot];  // std::map: the address stays valid
    auto add = [&](const py::handle& item) {
      if (AsTensor(item.ptr()) == nullptr) at_.emplace_back(&list, list.size());
      list.push_back(ToTensor(item, what));
    };
    if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      for (const py::handle& item : value) add(item);
    } else {
      add(value);
    }
  }

  void Place(const eager::TensorMap& in) {
    if (at_.empty()) return;
    Device* device = nullptr;
    for (const auto& [slot, list] : in) {
      for (size_t i = 0; i < list.size() && device == nullptr; ++i) {
        bool converted = false;
        for (const auto& [l, j] : at_) converted = converted || (l == &list && j == i);
        if (!converted && list[i].Defined() && list[i].Data().IsInitialized()) device = &list[i].GetDevice();
      }
    }
    if (device == nullptr) return;
    for (const auto& [list, i] : at_) {
      Tensor& t = (*list)[i];
      if (&t.GetDevice() != device) t = Tensor::FromCore(OnDevice(t.Data(), *device));
    }
  }

 private:
  std::vector<std::pair<std::vector<Tensor>*, size_t>> at_;
};

eager::TensorMap InputsFromPython(const py::handle& inputs, const std::string& type) {
  eager::TensorMap map;
  if (inputs.is_none()) return map;
  NABLA_ENFORCE(py::isinstance<py::dict>(inputs), kInvalidArgument, "call('", type,
                "'): inputs must be a dict {slot: Tensor or list of Tensors} but received ", TypeName(inputs));
  ConvertedInputs converted;
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(inputs)) {
    const std::string slot = py::str(key);
    converted.Add(map, slot, value, "call('" + type + "') input " + slot);
  }
  converted.Place(map);
  return map;
}

py::object CallPy(const std::string& type, const py::handle& inputs, const py::handle& attrs,
                  const py::handle& output_counts) {
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(type);
  eager::TensorMap in = InputsFromPython(inputs, type);
  AttributeMap a = AttrsFromPython(attrs, info.schema, "call('" + type + "')");
  eager::OutputCounts counts;
  if (!output_counts.is_none()) counts = py::cast<eager::OutputCounts>(output_counts);
  return OutputsToPython(eager::Call(type, in, a, counts));
}

// ------------------------------------------------------------ nabla.ops.<type>

// The function behind nabla.ops.<type> (nabla/__init__.py subclasses it per
// op for the docstring): positional arguments fill the input slots in schema
// order, keywords name slots or attributes. Argument handling lives here, not
// in Python, because it is most of the per-op cost a user sees; a call with
// no attributes goes through a prepared eager::Op.
class OpFunction {
 public:
  OpFunction(std::string type, std::vector<std::string> inputs, std::vector<std::string> outputs,
             std::vector<bool> duplicable, py::object make_outputs)
      : type_(std::move(type)),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        duplicable_(std::move(duplicable)),
        make_outputs_(std::move(make_outputs)),
        op_(type_) {
    for (size_t i = 0; i < inputs_.size(); ++i) order_.push_back(i);
    std::sort(order_.begin(), order_.end(), [this](size_t a, size_t b) { return inputs_[a] < inputs_[b]; });
  }

  // The CPython call slot's path: positional Tensors (None for a slot left
  // out) go straight to the prepared op, with no TensorMap, kwargs dict or
  // pybind11 argument conversion; anything else takes operator().
  PyObject* FastCall(PyObject* args, PyObject* kwargs) {
    const size_t nargs = static_cast<size_t>(PyTuple_GET_SIZE(args));
    constexpr size_t kMax = 8;
    bool fast =
        nargs <= inputs_.size() && inputs_.size() <= kMax && (kwargs == nullptr || PyDict_GET_SIZE(kwargs) == 0);
    eager::SlotInput slots[kMax];
    size_t n = 0;
    for (size_t k = 0; fast && k < inputs_.size(); ++k) {
      const size_t i = order_[k];
      if (i >= nargs) continue;
      PyObject* value = PyTuple_GET_ITEM(args, i);
      if (value == Py_None) continue;
      const Tensor* t = AsTensor(value);
      fast = t != nullptr;
      if (fast) slots[n++] = eager::SlotInput{&inputs_[i], t, 1};
    }
    if (!fast) {
      py::args a = py::reinterpret_borrow<py::args>(args);
      py::kwargs kw = kwargs ? py::reinterpret_borrow<py::kwargs>(kwargs) : py::kwargs();
      return (*this)(a, kw).release().ptr();
    }
    const eager::Outputs out = op_.Run(slots, n);
    return Result(out).release().ptr();
  }

  py::object operator()(const py::args& args, const py::kwargs& kwargs) {
    if (args.size() > inputs_.size()) {
      throw py::type_error(StrCat(type_, "() takes ", inputs_.size(), " input(s) but ", args.size(), " were given"));
    }
    eager::TensorMap in;
    ConvertedInputs converted;
    for (size_t i = 0; i < args.size(); ++i) AddInput(in, inputs_[i], args[i], converted);
    AttributeMap attrs;
    eager::OutputCounts counts;
    for (const auto& [key, value] : kwargs) {
      const std::string name = py::str(key);
      if (name == "output_counts") {
        if (!value.is_none()) counts = py::cast<eager::OutputCounts>(value);
        continue;
      }
      bool is_input = false;
      for (const std::string& slot : inputs_) is_input = is_input || slot == name;
      if (is_input) {
        if (in.count(name)) throw py::type_error(StrCat(type_, "() got input ", name, " twice"));
        AddInput(in, name, value, converted);
        continue;
      }
      const OpSchema& schema = CurrentRegistry()->Get(type_).schema;
      const AttrDef* def = schema.FindAttr(name);
      if (def == nullptr) {
        std::string known;
        for (const AttrDef& a : schema.attrs) known += (known.empty() ? "" : ", ") + a.name;
        std::string slots;
        for (const std::string& slot : inputs_) slots += (slots.empty() ? "" : ", ") + slot;
        throw py::type_error(StrCat(type_, "() has no input or attribute '", name,
                                    "' (inputs: ", slots.empty() ? "none" : slots,
                                    "; attributes: ", known.empty() ? "none" : known, ")"));
      }
      attrs[name] = AttrFromPython(value, def->type, type_ + "(): attribute '" + name + "'");
    }
    converted.Place(in);
    const eager::Outputs out = attrs.empty() && counts.empty() ? op_(in) : eager::Call(type_, in, attrs, counts);
    return Result(out);
  }

 private:
  static void AddInput(eager::TensorMap& in, const std::string& slot, const py::handle& value,
                       ConvertedInputs& converted) {
    if (value.is_none()) return;  // a dispensable slot left out
    converted.Add(in, slot, value, "input " + slot);
  }

  py::object Result(const eager::Outputs& out) const {
    if (outputs_.size() == 1) return Slot(out, 0);
    py::tuple values(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) values[i] = Slot(out, i);
    return make_outputs_(*values);
  }

  py::object Slot(const eager::Outputs& out, size_t i) const {
    const size_t k = out.SlotIndex(outputs_[i]);
    if (k == out.NumSlots()) return py::none();
    const Tensor* tensors = out.SlotData(k);
    const size_t n = out.SlotSize(k);
    if (duplicable_[i]) {
      py::list list(n);
      for (size_t j = 0; j < n; ++j) PyList_SET_ITEM(list.ptr(), j, ToPy(tensors[j]));
      return std::move(list);
    }
    return n == 0 ? py::none() : py::reinterpret_steal<py::object>(ToPy(tensors[0]));
  }

  std::string type_;
  std::vector<std::string> inputs_;
  std::vector<std::string> outputs_;
  std::vector<bool> duplicable_;
  py::object make_outputs_;  // builds the tuple of several outputs
  eager::Op op_;
  std::vector<size_t> order_;  // inputs_ indices in ascending slot-name order (Op::Run's)
};

PyTypeObject* g_op_function_type = nullptr;
const py::detail::type_info* g_op_function_info = nullptr;

PyObject* OpFunctionCall(PyObject* self, PyObject* args, PyObject* kwargs) {
  return Guarded([&] {
    auto* f = static_cast<OpFunction*>(CppObject(self, g_op_function_info));
    if (f == nullptr) throw py::type_error("nabla.ops function used before its __init__");
    return f->FastCall(args, kwargs);
  });
}

// Makes OpFunctionCall the call slot of _OpFunction and of the classes
// nabla/__init__.py derives from it per op. A subclass takes a base's slot
// function directly only when the base's __call__ is a slot wrapper around
// it (else every call goes through a __call__ lookup and a bound method), so
// the wrapper is made from the one CPython gives functions.
void InstallOpFunctionCall(py::handle cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  PyObject* function_call = PyDict_GetItemString(PyFunction_Type.tp_dict, "__call__");  // borrowed
  if (function_call == nullptr || !Py_IS_TYPE(function_call, &PyWrapperDescr_Type)) {
    throw std::runtime_error("nabla: this Python has no slot wrapper for function.__call__");
  }
  py::object descr = py::reinterpret_steal<py::object>(PyDescr_NewWrapper(
      type, reinterpret_cast<PyWrapperDescrObject*>(function_call)->d_base, reinterpret_cast<void*>(&OpFunctionCall)));
  if (!descr) throw py::error_already_set();
  cls.attr("__call__") = descr;  // type_setattro points tp_call at OpFunctionCall
  type->tp_call = &OpFunctionCall;
  PyType_Modified(type);
}

// ------------------------------------------------------------ operators

// One prepared op per operator: `a + b` does no registry or name lookup.
// The GIL serializes Python callers, so sharing them is safe.
// (eager::Op rebuilds itself when a plugin load publishes a new registry.)
struct Ops {
  eager::Op add{"elementwise_add"}, sub{"elementwise_sub"}, mul{"elementwise_mul"}, div{"elementwise_div"},
      matmul{"matmul"};
};

Ops& Operators() {
  static Ops* ops = new Ops();  // leaked: must not be torn down after the interpreter
  return *ops;
}

Tensor Binary(eager::Op& op, const Tensor& x, const Tensor& y) {
  static const std::string kX = "X", kY = "Y", kOut = "Out";
  const eager::SlotInput slots[2] = {{&kX, &x, 1}, {&kY, &y, 1}};
  return op.Run(slots, 2)[kOut];
}

Tensor Scale(const Tensor& x, float scale, float bias) {
  return eager::Call("scale", {{"X", {x}}}, {{"scale", scale}, {"bias", bias}})["Out"];
}

bool IsScalar(const py::handle& obj) {
  return !py::isinstance<py::bool_>(obj) && (py::isinstance<py::float_>(obj) || py::isinstance<py::int_>(obj));
}

// x (op) other, with other a Tensor, an ndarray or a Python number. The
// elementwise ops broadcast Y onto X (Paddle's rule), so the operand of
// higher rank goes first where the op commutes.
enum class Arith { kAdd, kSub, kMul, kDiv };

Tensor ArithOp(const Tensor& x, const py::handle& other, Arith kind, bool reflected) {
  const DType dtype = x.GetDType();
  if (IsScalar(other) && !IsFloating(dtype)) {
    // PyTorch promotes these to floating point; a one-element tensor of x's
    // integer dtype would truncate the float (t * 2.5 gave t * 2), make `/`
    // an integer division and wrap a large int. Refused instead: the caller
    // casts first and says which float dtype it wants.
    NABLA_ENFORCE(!py::isinstance<py::float_>(other), kInvalidArgument, "a float scalar with a tensor of dtype ",
                  DTypeName(dtype), ": cast the tensor to a floating dtype first (nabla.ops.cast)");
    NABLA_ENFORCE(kind != Arith::kDiv, kInvalidArgument, "true division of a tensor of dtype ", DTypeName(dtype),
                  ": cast it to a floating dtype first (nabla.ops.cast)");
    if (dtype == DType::kInt32 || dtype == DType::kInt64) {
      const bool narrow = dtype == DType::kInt32;
      const py::int_ lo(narrow ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min());
      const py::int_ hi(narrow ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max());
      NABLA_ENFORCE(!(other < lo) && !(other > hi), kInvalidArgument, "the scalar ", std::string(py::str(other)),
                    " does not fit a tensor of dtype ", DTypeName(dtype));
    }
  }
  // float32 and bfloat16 with a number: one scale op, the number rounded to
  // float32 as PyTorch rounds a scalar to a float32 tensor's type. Not for
  // division (x * (1 / c) is not x / c rounded once) nor for float64, whose
  // scalars a float32 attribute would round: a one-element tensor of x's
  // dtype and the elementwise op.
  if (IsScalar(other) && (dtype == DType::kFloat32 || dtype == DType::kBFloat16)) {
    const float c = py::cast<float>(other);
    switch (kind) {
      case Arith::kAdd:
        return Scale(x, 1.0f, c);
      case Arith::kSub:
        return reflected ? Scale(x, -1.0f, c) : Scale(x, 1.0f, -c);
      case Arith::kMul:
        return Scale(x, c, 0.0f);
      case Arith::kDiv:
        // NumPy has no bfloat16 for the one-element tensor.
        if (!reflected && dtype == DType::kBFloat16) return Scale(x, 1.0f / c, 0.0f);
        break;
    }
  }
  Tensor y = ToTensor(other, "operand", &x);
  const Tensor& a = reflected ? y : x;
  const Tensor& b = reflected ? x : y;
  Ops& ops = Operators();
  const bool swap = a.GetShape().size() < b.GetShape().size();
  switch (kind) {
    case Arith::kAdd:
      return swap ? Binary(ops.add, b, a) : Binary(ops.add, a, b);
    case Arith::kMul:
      return swap ? Binary(ops.mul, b, a) : Binary(ops.mul, a, b);
    case Arith::kSub:
      return swap ? Scale(Binary(ops.sub, b, a), -1.0f, 0.0f) : Binary(ops.sub, a, b);
    case Arith::kDiv:
      return Binary(ops.div, a, b);
  }
  NABLA_THROW(kInvalidArgument, "unknown arithmetic operator");
}

// The number slots of nabla.Tensor: `a + b` calls them with the Tensor on
// either side (the reflected case when the left operand declined).
template <Arith kind>
PyObject* NbArith(PyObject* a, PyObject* b) {
  Tensor* ta = AsTensor(a);
  Tensor* tb = ta != nullptr ? nullptr : AsTensor(b);
  if (ta == nullptr && tb == nullptr) Py_RETURN_NOTIMPLEMENTED;
  return Guarded([&] { return ToPy(ArithOp(ta ? *ta : *tb, py::handle(ta ? b : a), kind, ta == nullptr)); });
}

PyObject* NbMatmul(PyObject* a, PyObject* b) {
  Tensor* ta = AsTensor(a);
  Tensor* tb = AsTensor(b);
  if (ta == nullptr && tb == nullptr) Py_RETURN_NOTIMPLEMENTED;
  return Guarded([&] {
    eager::Op& op = Operators().matmul;
    if (ta && tb) return ToPy(Binary(op, *ta, *tb));
    if (ta) return ToPy(Binary(op, *ta, ToTensor(py::handle(b), "operand", ta)));
    return ToPy(Binary(op, ToTensor(py::handle(a), "operand", tb), *tb));
  });
}

// NumPy has no bfloat16: such a tensor's dtype is the string "bfloat16"
// (its .numpy() is a float32 copy).
py::object DTypeOf(const Tensor& t) {
  if (t.GetDType() == DType::kBFloat16) return py::str("bfloat16");
  return NumpyDType(t.GetDType());
}

// The array is read-only: writing through it would change a tensor the
// tape may have saved without bumping its version (a silently wrong
// gradient). .numpy().copy() gives a writable array.
py::array NumpyOf(const Tensor& t) {
  py::array a = ArrayFromTensor(t.Data());
  a.attr("flags").attr("writeable") = false;
  return a;
}

// ------------------------------------------------------------ no_grad, Tape

class NoGrad {
 public:
  void Enter() { guards_.push_back(std::make_unique<eager::NoGradGuard>()); }
  void Exit() {
    if (!guards_.empty()) guards_.pop_back();
  }

 private:
  std::vector<std::unique_ptr<eager::NoGradGuard>> guards_;
};

}  // namespace

void BindEager(py::module_& m) {
  py::class_<Tensor> cls(m, "Tensor",
                         "An eager tensor: ops run as they are called and, when an input requires grad, are recorded "
                         "with their grad ops for backward().");
  // ndarray + Tensor: NumPy defers to Tensor.__radd__ instead of turning the
  // tensor into an array (and the result into an ndarray without gradient).
  cls.attr("__array_ufunc__") = py::none();
  cls.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.GetShape())); })
      .def_property_readonly("dtype", &DTypeOf)
      .def_property_readonly("ndim", [](const Tensor& t) { return t.GetShape().size(); })
      .def_property_readonly(
          "device", [](const Tensor& t) { return DeviceSpec(t.GetDevice()); },
          "Where the data lives, as nabla.tensor(device=) takes it: 'cpu', or NAME:N for another backend "
          "('opencl:0').")
      .def_property(
          "name", [](const Tensor& t) { return t.Name(); }, [](Tensor& t, const std::string& name) { t.SetName(name); })
      .def_property(
          "requires_grad", [](const Tensor& t) { return t.RequiresGrad(); },
          [](Tensor& t, bool r) { t.SetRequiresGrad(r); })
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = t.Grad();
            return g.Defined() ? py::cast(g) : py::none();
          },
          [](Tensor& t, const py::object& g) {
            NABLA_ENFORCE(g.is_none(), kInvalidArgument,
                          "Tensor.grad can only be set to None (to drop the accumulated gradient)");
            t.ZeroGrad();
          },
          "The accumulated gradient (a Tensor), or None.")
      .def_property_readonly("is_leaf", &Tensor::IsLeaf)
      .def_property_readonly("version", &Tensor::Version)
      .def("numpy", &NumpyOf, "The data as a read-only ndarray sharing the tensor's memory.")
      .def(
          "__array__",
          [](const Tensor& t, const py::object& dtype) {
            py::array a = NumpyOf(t);
            return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none())
      .def("item",
           [](const Tensor& t) {
             NABLA_ENFORCE(t.Numel() == 1, kInvalidArgument, "Tensor.item(): expected one element but ", t.ToString(),
                           " has ", t.Numel());
             return NumpyOf(t).attr("reshape")(-1).attr("__getitem__")(0).attr("item")();
           })
      .def("numel", &Tensor::Numel)
      .def("__len__",
           [](const Tensor& t) {
             NABLA_ENFORCE(!t.GetShape().empty(), kInvalidArgument, "len() of a 0-d tensor");
             return t.GetShape()[0];
           })
      .def(
          "backward",
          [](const Tensor& t, bool retain_graph) {
            py::gil_scoped_release release;
            t.Backward(retain_graph);
          },
          py::arg("retain_graph") = false,
          "Backward from this one-element tensor: adds d(this)/d(leaf) to every leaf's grad. Without "
          "retain_graph the recorded graph is freed and a second backward through it is an error.")
      .def("detach", &Tensor::Detach, "The same data with no grad history.")
      .def("retain_grad", &Tensor::RetainGrad, "Keep this non-leaf's gradient in .grad during backward.")
      .def("zero_grad", &Tensor::ZeroGrad)
      .def(
          "copy_",
          [](Tensor& t, const py::object& src) -> Tensor& {
            t.CopyFrom(ToTensor(src, "Tensor.copy_", &t));
            return t;
          },
          py::arg("src"),
          "Writes src into this tensor in place (refused on a leaf that requires grad, outside no_grad).")
      .def("__repr__", &Tensor::ToString)
      .def("__float__",
           [](const Tensor& t) {
             NABLA_ENFORCE(t.Numel() == 1, kInvalidArgument, "float(Tensor): expected one element but ", t.ToString(),
                           " has ", t.Numel());
             return py::float_(py::cast<double>(NumpyOf(t).attr("reshape")(-1)[py::int_(0)].attr("item")()));
           })
      .def("__bool__",
           [](const Tensor& t) {
             NABLA_ENFORCE(t.Numel() == 1, kInvalidArgument, "bool(Tensor): the truth value of ", t.ToString(),
                           " with ", t.Numel(), " elements is ambiguous: use .numpy().any() or .all()");
             return py::bool_(NumpyOf(t).attr("reshape")(-1)[py::int_(0)]);
           })
      .def("__add__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kAdd, false); })
      .def("__radd__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kAdd, true); })
      .def("__sub__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kSub, false); })
      .def("__rsub__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kSub, true); })
      .def("__mul__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kMul, false); })
      .def("__rmul__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kMul, true); })
      .def("__truediv__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kDiv, false); })
      .def("__rtruediv__", [](const Tensor& x, const py::object& o) { return ArithOp(x, o, Arith::kDiv, true); })
      .def("__neg__", [](const Tensor& x) { return Scale(x, -1.0f, 0.0f); })
      .def("__matmul__", [](const Tensor& x,
                            const py::object& o) { return Binary(Operators().matmul, x, ToTensor(o, "operand", &x)); })
      .def("__rmatmul__", [](const Tensor& x, const py::object& o) {
        return Binary(Operators().matmul, ToTensor(o, "operand", &x), x);
      });

  // After the defs above, which point these slots at the generic lookups.
  g_tensor_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  g_tensor_info = py::detail::get_type_info(typeid(Tensor));
  {
    auto* heap = reinterpret_cast<PyHeapTypeObject*>(cls.ptr());
    heap->as_number.nb_add = &NbArith<Arith::kAdd>;
    heap->as_number.nb_subtract = &NbArith<Arith::kSub>;
    heap->as_number.nb_multiply = &NbArith<Arith::kMul>;
    heap->as_number.nb_true_divide = &NbArith<Arith::kDiv>;
    heap->as_number.nb_matrix_multiply = &NbMatmul;
    PyType_Modified(g_tensor_type);
  }

  m.def("tensor", &MakeTensor, py::arg("data"), py::arg("requires_grad") = false, py::arg("name") = py::none(),
        py::arg("device") = py::none(),
        "A leaf tensor over `data` (an ndarray or anything np.asarray takes) on `device` (NAME or NAME:N as "
        "`nabla devices` lists them: 'cpu', 'opencl:1'; None: the default device, see set_default_device). On the CPU "
        "a C-contiguous float32, float64, "
        "int32, int64 or bool array is shared, not copied, as torch.from_numpy does; other layouts are copied once.");
  m.def(
      "set_default_device",
      [](const std::string& spec) { eager::SetDefaultDevice(&ResolveDevice(spec, "set_default_device")); },
      py::arg("device"),
      "The device (NAME or NAME:N as `nabla devices` lists them) that nabla.tensor and ndarray operands use when none "
      "is named "
      "(per thread; the CPU until set).");
  m.def(
      "default_device", [] { return DeviceSpec(eager::DefaultDevice()); },
      "The default device as set_default_device takes it ('cpu', 'opencl:0').");
  m.def("_call", &CallPy, py::arg("type"), py::arg("inputs"), py::arg("attrs") = py::none(),
        py::arg("output_counts") = py::none());
  m.def("grad_enabled", &eager::GradEnabled, "False inside nabla.no_grad().");

  py::class_<OpFunction> op_function(m, "_OpFunction", py::dynamic_attr());
  op_function.def(
      py::init<std::string, std::vector<std::string>, std::vector<std::string>, std::vector<bool>, py::object>());
  g_op_function_type = reinterpret_cast<PyTypeObject*>(op_function.ptr());
  g_op_function_info = py::detail::get_type_info(typeid(OpFunction));
  InstallOpFunctionCall(op_function);

  py::class_<NoGrad>(m, "_NoGrad").def(py::init<>()).def("enter", &NoGrad::Enter).def("exit", &NoGrad::Exit);

  py::class_<eager::Tape>(m, "_Tape")
      .def(py::init<>())
      .def("stop", &eager::Tape::Stop)
      .def_property_readonly("recording", &eager::Tape::Recording)
      .def("__len__", &eager::Tape::Size)
      .def("clear", &eager::Tape::Clear)
      .def("to_dot", &eager::Tape::ToDot)
      .def("to_program", [](const eager::Tape& t) { return std::make_shared<ProgramDesc>(t.ToProgram()); })
      .def("leaves",
           [](const eager::Tape& t) {
             py::list out;
             for (const auto& leaf : t.Leaves()) out.append(py::make_tuple(leaf.name, leaf.tensor, leaf.parameter));
             return out;
           })
      .def("var_name", &eager::Tape::VarName)
      .def("save", [](const eager::Tape& t, const py::object& dir) { return t.Save(py::str(dir)); });
}

}  // namespace nabla::python
