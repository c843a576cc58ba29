#pragma once
// The C++ plugin SDK over nabla's C ABI (nabla/c_api.h): NABLA_PLUGIN,
// NABLA_REGISTER_OPS, the op builder, the contexts of inference, grad makers
// and kernels, tensors and errors, header-only. A plugin built with
// nabla_add_plugin(... ABI C) (the default against an installed nabla) gets
// these from nabla/plugin.h (nabla/sdk/shim comes first on its include path)
// instead of the core's C++ classes: the same names and the same calls, so a
// plugin's sources do not change, but everything crosses into the core
// through the C table, and the binary needs no symbol of nabla's C++ and no
// particular compiler.
//
// Everything lives in the inline namespace nabla::c_sdk: spelled nabla::X in
// source, mangled apart from the core's own nabla::X.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "nabla/bf16_bits.h"
#include "nabla/c_api.h"

namespace nabla {
inline namespace c_sdk {

// Declared before any op kit header (they include core headers, which the
// shim maps here), so that the kit's `namespace nabla::opkit` extends this
// inline namespace: its symbols stay apart from the core's op kit.
namespace opkit {}

namespace sdk_detail {
// The table the core handed this plugin (inline + hidden visibility +
// -fno-gnu-unique: one per plugin).
inline const nabla_api*& ApiSlot() {
  static const nabla_api* api = nullptr;
  return api;
}
}  // namespace sdk_detail
inline const nabla_api& Api() { return *sdk_detail::ApiSlot(); }

// ---------------------------------------------------------------- errors

enum class ErrorKind {
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kOutOfRange,
  kPreconditionNotMet,
  kUnimplemented,
  kExternal,
  kRuntime,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  bool IsBadInput() const { return kind_ <= ErrorKind::kPreconditionNotMet; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] inline void ThrowError(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

namespace sdk_detail {
// The error a table function left on this thread, as an exception.
[[noreturn]] inline void ThrowApiError() {
  int32_t kind = NABLA_C_RUNTIME;
  const char* message = Api().last_error(&kind);
  throw Error(static_cast<ErrorKind>(kind), message && *message ? message : "a nabla C API call failed");
}
inline void Check(int32_t status) {
  if (status != NABLA_C_OK) ThrowApiError();
}
template <typename P>
P* CheckPtr(P* p) {
  if (!p) ThrowApiError();
  return p;
}
// Runs plugin code for the core: whatever it throws becomes the thread's
// error and NABLA_C_ERROR, because nothing may unwind into the core.
template <typename F>
int32_t Guard(F&& f) noexcept {
  try {
    f();
    return NABLA_C_OK;
  } catch (const Error& e) {
    Api().set_error(static_cast<int32_t>(e.kind()), e.what());
  } catch (const std::exception& e) {
    Api().set_error(NABLA_C_RUNTIME, e.what());
  } catch (...) {
    Api().set_error(NABLA_C_RUNTIME, "an exception that is not a std::exception");
  }
  return NABLA_C_ERROR;
}
}  // namespace sdk_detail

}  // namespace c_sdk
}  // namespace nabla

#ifndef NABLA_ENFORCE
#define NABLA_ENFORCE(cond, kind, ...)                                                        \
  do {                                                                                        \
    if (!(cond)) ::nabla::ThrowError(::nabla::ErrorKind::kind, ::nabla::StrCat(__VA_ARGS__)); \
  } while (0)
#define NABLA_THROW(kind, ...) ::nabla::ThrowError(::nabla::ErrorKind::kind, ::nabla::StrCat(__VA_ARGS__))
#endif

namespace nabla {
inline namespace c_sdk {

// ---------------------------------------------------------------- types

enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBool, kBFloat16 };
inline const char* DTypeName(DType d) {
  static const char* const kNames[] = {"float32", "float64", "int32", "int64", "bool", "bfloat16"};
  const int i = static_cast<int>(d);
  return i >= 0 && i < 6 ? kNames[i] : "unknown";
}
inline size_t DTypeSize(DType d) {
  static const size_t kSizes[] = {4, 8, 4, 8, 1, 2};
  return kSizes[static_cast<int>(d)];
}
inline bool IsFloating(DType d) { return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kBFloat16; }

struct bfloat16 {
  uint16_t bits;
};
// As nabla/types.h's: exact, and rounding to nearest even (NaN stays NaN).
inline float Bf16ToFloat(bfloat16 b) { return bf16_bits::ToFloat(b.bits); }
inline bfloat16 FloatToBf16(float f) { return bfloat16{bf16_bits::FromFloat(f)}; }
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};
template <>
struct DTypeOf<bfloat16> {
  static constexpr DType value = DType::kBFloat16;
};

// kCPU and kOpenCL are fixed; a device plugin's type is another value, from
// RegisterDeviceType("name") or Registrar::DeviceBackend.
enum class DeviceType { kCPU, kOpenCL };
inline const char* DeviceTypeName(DeviceType t) {
  const char* name = sdk_detail::ApiSlot() ? Api().device_type_name(static_cast<int32_t>(t)) : nullptr;
  return name ? name : t == DeviceType::kCPU ? "cpu" : t == DeviceType::kOpenCL ? "opencl" : "unregistered-device";
}
// The device type named `name` (a device plugin's, loaded yet or not): an op
// plugin registers kernels for another plugin's device with it.
inline DeviceType RegisterDeviceType(const std::string& name) {
  const int32_t id = Api().device_type_id(name.c_str());
  if (id < 0) sdk_detail::ThrowApiError();
  return static_cast<DeviceType>(id);
}

using Shape = std::vector<int64_t>;
inline int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
inline std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline constexpr const char* kGradSuffix = "@GRAD";
inline constexpr const char* kEmptyVarName = "@EMPTY@";
inline std::string GradVarName(const std::string& name) { return name + kGradSuffix; }
inline bool IsGradVarName(const std::string& name) {
  const std::string suffix = kGradSuffix;
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// x@GRAD (and x@GRAD@RENAME@n, a renamed partial gradient) -> x, as the core's.
inline constexpr const char* kRenameInfix = "@RENAME@";
inline std::string StripGradSuffix(const std::string& grad_name) {
  std::string base = grad_name;
  const size_t rename = base.rfind(kRenameInfix);
  if (rename != std::string::npos) base.resize(rename);
  if (IsGradVarName(base)) base.resize(base.size() - std::strlen(kGradSuffix));
  return base;
}

// Attributes: the core's alternatives less block references, which the C ABI
// does not carry.
enum class AttrType { kInt, kFloat, kString, kBool, kInts, kFloats, kStrings, kBools };
using Attribute = std::variant<int, float, std::string, bool, std::vector<int>, std::vector<float>,
                               std::vector<std::string>, std::vector<bool>>;
using AttributeMap = std::map<std::string, Attribute>;
namespace sdk_detail {
template <typename T, typename V>
struct IndexIn;
template <typename T, typename... Ts>
struct IndexIn<T, std::variant<Ts...>> {
  static constexpr size_t Find() {
    constexpr bool matches[] = {std::is_same_v<T, Ts>...};
    for (size_t i = 0; i < sizeof...(Ts); ++i)
      if (matches[i]) return i;
    return sizeof...(Ts);
  }
};
}  // namespace sdk_detail
// The AttrType of an alternative (Attr<float> -> kFloat).
template <typename T>
struct AttrTypeOf {
  static_assert(sdk_detail::IndexIn<T, Attribute>::Find() < std::variant_size_v<Attribute>,
                "not an attribute type of the C ABI (int, float, string, bool, or a vector of one)");
  static constexpr AttrType value = static_cast<AttrType>(sdk_detail::IndexIn<T, Attribute>::Find());
};

using VarNameMap = std::map<std::string, std::vector<std::string>>;

}  // namespace c_sdk
}  // namespace nabla

namespace nabla {
inline namespace c_sdk {

namespace sdk_detail {

inline std::string Str(const char* s) { return s ? std::string(s) : std::string(); }

inline Attribute FromC(const nabla_attr_value& v) {
  switch (v.type) {
    case NABLA_C_ATTR_INT:
      return static_cast<int>(v.i);
    case NABLA_C_ATTR_FLOAT:
      return static_cast<float>(v.f);
    case NABLA_C_ATTR_STRING:
      return Str(v.s);
    case NABLA_C_ATTR_BOOL:
      return v.b != 0;
    case NABLA_C_ATTR_INTS: {
      const auto* p = static_cast<const int32_t*>(v.list);
      return std::vector<int>(p, p + (p ? v.count : 0));
    }
    case NABLA_C_ATTR_FLOATS: {
      const auto* p = static_cast<const float*>(v.list);
      return std::vector<float>(p, p + (p ? v.count : 0));
    }
    case NABLA_C_ATTR_STRINGS: {
      const auto* p = static_cast<const char* const*>(v.list);
      std::vector<std::string> out;
      for (size_t i = 0; p && i < v.count; ++i) out.push_back(Str(p[i]));
      return out;
    }
    case NABLA_C_ATTR_BOOLS: {
      const auto* p = static_cast<const int32_t*>(v.list);
      std::vector<bool> out;
      for (size_t i = 0; p && i < v.count; ++i) out.push_back(p[i] != 0);
      return out;
    }
    default:
      NABLA_THROW(kUnimplemented, "an attribute of type ", v.type, " is not part of this SDK's C ABI version");
  }
}

// An attribute as C, with the storage its lists point into.
struct CAttr {
  nabla_attr_value value{};
  std::vector<int32_t> ints;
  std::vector<const char*> strings;
  explicit CAttr(const Attribute& a) {
    value.type = static_cast<int32_t>(a.index());
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, int>) {
            value.i = x;
          } else if constexpr (std::is_same_v<X, float>) {
            value.f = x;
          } else if constexpr (std::is_same_v<X, bool>) {
            value.b = x ? 1 : 0;
          } else if constexpr (std::is_same_v<X, std::string>) {
            value.s = x.c_str();
          } else if constexpr (std::is_same_v<X, std::vector<int>>) {
            ints.assign(x.begin(), x.end());
            value.list = ints.data();
            value.count = ints.size();
          } else if constexpr (std::is_same_v<X, std::vector<float>>) {
            value.list = x.data();
            value.count = x.size();
          } else if constexpr (std::is_same_v<X, std::vector<std::string>>) {
            for (const std::string& s : x) strings.push_back(s.c_str());
            value.list = strings.data();
            value.count = strings.size();
          } else {
            ints.assign(x.begin(), x.end());
            value.list = ints.data();
            value.count = ints.size();
          }
        },
        a);
  }
};

}  // namespace sdk_detail

// ---------------------------------------------------------------- ops

// An op: the value a grad maker builds and returns, and a copy of the op a
// context is about.
class OpDesc {
 public:
  OpDesc() = default;
  OpDesc(std::string type, VarNameMap inputs, VarNameMap outputs, AttributeMap attrs)
      : type_(std::move(type)), inputs_(std::move(inputs)), outputs_(std::move(outputs)), attrs_(std::move(attrs)) {}

  const std::string& Type() const { return type_; }
  void SetType(std::string t) { type_ = std::move(t); }
  const VarNameMap& Inputs() const { return inputs_; }
  const VarNameMap& Outputs() const { return outputs_; }
  VarNameMap& MutableInputs() { return inputs_; }
  VarNameMap& MutableOutputs() { return outputs_; }
  const std::vector<std::string>& Input(const std::string& slot) const { return Args(inputs_, slot); }
  const std::vector<std::string>& Output(const std::string& slot) const { return Args(outputs_, slot); }
  bool HasInput(const std::string& slot) const { return inputs_.count(slot) != 0; }
  bool HasOutput(const std::string& slot) const { return outputs_.count(slot) != 0; }
  void SetInput(const std::string& slot, std::vector<std::string> args) { inputs_[slot] = std::move(args); }
  void SetOutput(const std::string& slot, std::vector<std::string> args) { outputs_[slot] = std::move(args); }
  const AttributeMap& Attrs() const { return attrs_; }
  AttributeMap& MutableAttrs() { return attrs_; }
  bool HasAttr(const std::string& name) const { return attrs_.count(name) != 0; }
  void SetAttr(const std::string& name, Attribute value) { attrs_[name] = std::move(value); }
  const Attribute& GetAttr(const std::string& name) const {
    auto it = attrs_.find(name);
    NABLA_ENFORCE(it != attrs_.end(), kNotFound, "op '", type_, "' has no attribute '", name, "'");
    return it->second;
  }
  template <typename T>
  const T& Attr(const std::string& name) const {
    const T* v = std::get_if<T>(&GetAttr(name));
    NABLA_ENFORCE(v, kInvalidArgument, "attribute '", name, "' of op '", type_, "' is not of the type asked for");
    return *v;
  }

  // A copy of an op the core hands over.
  static OpDesc FromC(const nabla_op* op) {
    const nabla_api& api = Api();
    OpDesc d;
    d.type_ = sdk_detail::Str(sdk_detail::CheckPtr(api.op_type(op)));
    for (int32_t output = 0; output < 2; ++output) {
      VarNameMap& slots = output ? d.outputs_ : d.inputs_;
      const size_t n = api.op_slot_count(op, output);
      for (size_t s = 0; s < n; ++s) {
        const std::string slot = sdk_detail::Str(sdk_detail::CheckPtr(api.op_slot_name(op, output, s)));
        std::vector<std::string>& args = slots[slot];
        const size_t m = api.op_arg_count(op, output, slot.c_str());
        for (size_t i = 0; i < m; ++i) args.push_back(sdk_detail::CheckPtr(api.op_arg(op, output, slot.c_str(), i)));
      }
    }
    const size_t n = api.op_attr_count(op);
    for (size_t i = 0; i < n; ++i) {
      const char* name = sdk_detail::CheckPtr(api.op_attr_name(op, i));
      nabla_attr_value v;
      // Block attributes (control flow) have no C form: the copy leaves them out.
      if (api.op_get_attr(op, name, &v) == NABLA_C_OK) d.attrs_[name] = sdk_detail::FromC(v);
    }
    return d;
  }

 private:
  static const std::vector<std::string>& Args(const VarNameMap& m, const std::string& slot) {
    static const std::vector<std::string> kNone;
    auto it = m.find(slot);
    return it == m.end() ? kNone : it->second;
  }
  std::string type_;
  VarNameMap inputs_, outputs_;
  AttributeMap attrs_;
};

namespace sdk_detail {
template <typename T>
T ReadAttr(const nabla_op* op, const std::string& name) {
  nabla_attr_value v;
  Check(Api().op_get_attr(op, name.c_str(), &v));
  Attribute a = FromC(v);
  T* value = std::get_if<T>(&a);
  NABLA_ENFORCE(value, kInvalidArgument, "attribute '", name, "' of op '", Str(Api().op_type(op)),
                "' is not of the type asked for");
  return std::move(*value);
}
}  // namespace sdk_detail

// ---------------------------------------------------------------- device backends

// One device of this plugin's device backend (Registrar::DeviceBackend),
// opened once and never closed: its memory and copies. A method reports
// failure by throwing (the core prints one error line); a device may be used
// from several threads at once.
class BackendDevice {
 public:
  virtual ~BackendDevice() = default;
  virtual void* Allocate(size_t bytes) = 0;  // bytes > 0; never nullptr: throw instead
  virtual void Free(void* ptr, size_t bytes) = 0;
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void Synchronize() {}
};

// One device as `nabla devices` lists it (as NAME:<its index>).
struct DeviceInfo {
  std::vector<std::string> detail;  // the first line is its summary
  bool fp64 = true;                 // float64 kernels can run there
};

// What `--device NAME[:N]` resolves to. Its devices have the device type NAME.
struct DeviceBackendSpec {
  std::string name;
  std::function<std::vector<DeviceInfo>()> enumerate;
  // Device `index` (0 for a bare NAME); nullptr or a throw: no such device.
  std::function<std::unique_ptr<BackendDevice>(int index)> open;
  std::string none_found;      // why an empty listing is empty
  bool host_fallback = false;  // ops without a kernel here run their CPU kernel on host copies
};

namespace sdk_detail {
// The device types of this plugin's backends: the devices whose state is ours.
inline std::vector<int32_t>& OwnDeviceTypes() {
  static std::vector<int32_t> types;
  return types;
}
inline BackendDevice& Dev(void* device) { return *static_cast<BackendDevice*>(device); }
inline const DeviceBackendSpec& Spec(void* user) { return *static_cast<const DeviceBackendSpec*>(user); }
inline int32_t EnumerateTrampoline(const nabla_api*, void* user, nabla_device_list* list) {
  return Guard([&] {
    for (const DeviceInfo& d : Spec(user).enumerate()) {
      std::vector<const char*> lines;
      for (const std::string& line : d.detail) lines.push_back(line.c_str());
      Check(Api().device_list_add(list, lines.data(), lines.size(), d.fp64 ? 1 : 0));
    }
  });
}
inline void* OpenTrampoline(const nabla_api*, void* user, int32_t index) {
  void* device = nullptr;
  Guard([&] {
    std::unique_ptr<BackendDevice> d = Spec(user).open(index);
    NABLA_ENFORCE(d, kNotFound, "the ", Spec(user).name, " backend has no device ", index);
    device = d.release();  // the core never closes a device
  });
  return device;
}
inline void* AllocateTrampoline(const nabla_api*, void*, void* device, size_t bytes) {
  void* p = nullptr;
  Guard([&] {
    p = Dev(device).Allocate(bytes);
    NABLA_ENFORCE(p, kExternal, "the device returned no memory");
  });
  return p;
}
inline void DeallocateTrampoline(const nabla_api*, void*, void* device, void* ptr, size_t bytes) {
  Guard([&] { Dev(device).Free(ptr, bytes); });
}
inline int32_t FromHostTrampoline(const nabla_api*, void*, void* device, void* dst, const void* src, size_t n) {
  return Guard([&] { Dev(device).CopyFromHost(dst, src, n); });
}
inline int32_t ToHostTrampoline(const nabla_api*, void*, void* device, void* dst, const void* src, size_t n) {
  return Guard([&] { Dev(device).CopyToHost(dst, src, n); });
}
inline int32_t OnDeviceTrampoline(const nabla_api*, void*, void* device, void* dst, const void* src, size_t n) {
  return Guard([&] { Dev(device).CopyOnDevice(dst, src, n); });
}
inline int32_t SynchronizeTrampoline(const nabla_api*, void*, void* device) {
  return Guard([&] { Dev(device).Synchronize(); });
}
}  // namespace sdk_detail

// ---------------------------------------------------------------- tensors

// A device of the core, seen through its handle.
class Device {
 public:
  Device() = delete;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  DeviceType Type() const { return static_cast<DeviceType>(Api().device_type(Handle())); }
  // The device object this plugin's backend opened, as D (a BackendDevice);
  // nullptr for any other device.
  template <typename D>
  D* As() const {
    const std::vector<int32_t>& own = sdk_detail::OwnDeviceTypes();
    if (std::find(own.begin(), own.end(), Api().device_type(Handle())) == own.end()) return nullptr;
    return dynamic_cast<D*>(static_cast<BackendDevice*>(Api().device_state(Handle())));
  }
  const nabla_device* Handle() const { return reinterpret_cast<const nabla_device*>(this); }
  nabla_device* Handle() { return reinterpret_cast<nabla_device*>(this); }
};

// A tensor of the core, seen through its handle: kernels get references to
// it and never copy it.
class Tensor {
 public:
  Tensor() = delete;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  Shape GetShape() const {
    const int64_t* dims = Api().tensor_dims(Handle());
    return Shape(dims, dims + Rank());
  }
  size_t Rank() const { return Api().tensor_rank(Handle()); }
  int64_t Dim(size_t i) const {
    NABLA_ENFORCE(i < Rank(), kOutOfRange, "dim ", i, " of a tensor of rank ", Rank());
    return Api().tensor_dims(Handle())[i];
  }
  int64_t Numel() const { return Api().tensor_numel(Handle()); }
  DType GetDType() const { return static_cast<DType>(Api().tensor_dtype(Handle())); }
  size_t Bytes() const { return static_cast<size_t>(Numel()) * DTypeSize(GetDType()); }

  template <typename T>
  const T* Data() const {
    return static_cast<const T*>(RawData(DTypeOf<T>::value));
  }
  template <typename T>
  T* MutableData() {
    return static_cast<T*>(RawData(DTypeOf<T>::value));
  }
  void* Allocate(Device& device, DType dtype, const Shape& shape) {
    void* p = Api().tensor_allocate(Handle(), device.Handle(), static_cast<int32_t>(dtype), shape.data(), shape.size());
    if (!p && NumElements(shape) != 0) sdk_detail::ThrowApiError();
    return p;
  }
  template <typename T>
  T* Allocate(Device& device, const Shape& shape) {
    return static_cast<T*>(Allocate(device, DTypeOf<T>::value, shape));
  }
  // Shares other's data (no copy); shape and dtype follow it.
  void ShareDataWith(const Tensor& other) {
    const Shape shape = other.GetShape();
    sdk_detail::Check(Api().tensor_share(Handle(), other.Handle(), shape.data(), shape.size()));
  }
  // A new shape over the same data, with as many elements (a view's shape).
  void Resize(const Shape& shape) {
    sdk_detail::Check(Api().tensor_share(Handle(), Handle(), shape.data(), shape.size()));
  }
  std::string DebugString() const { return StrCat(DTypeName(GetDType()), ShapeToString(GetShape())); }

  const nabla_tensor* Handle() const { return reinterpret_cast<const nabla_tensor*>(this); }
  nabla_tensor* Handle() { return reinterpret_cast<nabla_tensor*>(this); }

 private:
  void* RawData(DType dtype) const {
    void* p = Api().tensor_data(Handle(), static_cast<int32_t>(dtype));
    if (!p && Numel() != 0) sdk_detail::ThrowApiError();
    return p;
  }
};

// An input's values copied to the host (InputHostTensor): what a
// tensor-valued attribute holds (a shape, a rate), wherever the tensor lives.
class HostTensor {
 public:
  HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
    for (int64_t d : shape_)
      NABLA_ENFORCE(d >= 0, kPreconditionNotMet, "the values of a tensor of shape ", ShapeToString(shape_),
                    " (dims unknown until run time) cannot be read yet");
    bytes_.resize(Bytes());
  }
  DType GetDType() const { return dtype_; }
  const Shape& GetShape() const { return shape_; }
  size_t Rank() const { return shape_.size(); }
  int64_t Numel() const { return NumElements(shape_); }
  template <typename T>
  const T* Data() const {
    NABLA_ENFORCE(DTypeOf<T>::value == dtype_, kInvalidArgument, "expected a tensor of ", DTypeName(DTypeOf<T>::value),
                  " but received ", DebugString());
    return reinterpret_cast<const T*>(bytes_.data());
  }
  void* RawData() { return bytes_.data(); }
  std::string DebugString() const { return StrCat(DTypeName(dtype_), ShapeToString(shape_)); }

 private:
  size_t Bytes() const { return static_cast<size_t>(NumElements(shape_)) * DTypeSize(dtype_); }
  DType dtype_;
  Shape shape_;
  std::vector<unsigned char> bytes_;
};

// ---------------------------------------------------------------- inference

class InferShapeContext {
 public:
  explicit InferShapeContext(nabla_infer_context* c) : c_(c) {}
  const OpDesc& Op() const {
    if (!op_) op_ = OpDesc::FromC(sdk_detail::CheckPtr(Api().infer_op(c_)));
    return *op_;
  }
  bool IsRuntime() const { return Flag(Api().infer_is_runtime(c_)); }
  bool HasInput(const std::string& slot) const { return Flag(Api().infer_has(c_, 0, slot.c_str())); }
  bool HasOutput(const std::string& slot) const { return Flag(Api().infer_has(c_, 1, slot.c_str())); }
  size_t InputSize(const std::string& slot) const { return Api().infer_count(c_, 0, slot.c_str()); }
  size_t OutputSize(const std::string& slot) const { return Api().infer_count(c_, 1, slot.c_str()); }
  Shape InputShape(const std::string& slot, size_t i = 0) const {
    const int64_t rank = Api().infer_input_rank(c_, slot.c_str(), i);
    if (rank < 0) sdk_detail::ThrowApiError();
    Shape s(static_cast<size_t>(rank));
    sdk_detail::Check(Api().infer_input_dims(c_, slot.c_str(), i, s.data()));
    return s;
  }
  DType InputDType(const std::string& slot, size_t i = 0) const {
    const int32_t d = Api().infer_input_dtype(c_, slot.c_str(), i);
    if (d < 0) sdk_detail::ThrowApiError();
    return static_cast<DType>(d);
  }
  void SetOutputShape(const std::string& slot, const Shape& shape, size_t i = 0) {
    sdk_detail::Check(Api().infer_set_output_shape(c_, slot.c_str(), i, shape.data(), shape.size()));
  }
  void SetOutputDType(const std::string& slot, DType dtype, size_t i = 0) {
    sdk_detail::Check(Api().infer_set_output_dtype(c_, slot.c_str(), i, static_cast<int32_t>(dtype)));
  }
  // Out[i] gets the shape and dtype of In[j].
  void ShareShapeAndDType(const std::string& in, const std::string& out, size_t i = 0, size_t j = 0) {
    SetOutputShape(out, InputShape(in, j), i);
    SetOutputDType(out, InputDType(in, j), i);
  }
  std::string Where() const { return sdk_detail::CheckPtr(Api().infer_where(c_)); }
  // Input slot[i]'s values on the host, for a shape that depends on them.
  // Only at run time (IsRuntime()); at build time this throws.
  HostTensor InputHostTensor(const std::string& slot, size_t i = 0) const {
    const DType dtype = InputDType(slot, i);
    // At build time the core refuses, naming the input: its error, not a
    // buffer sized from unknown (-1) dims.
    if (!IsRuntime())
      sdk_detail::Check(Api().infer_input_values(c_, slot.c_str(), i, static_cast<int32_t>(dtype), nullptr, 0));
    HostTensor t(dtype, InputShape(slot, i));
    sdk_detail::Check(Api().infer_input_values(c_, slot.c_str(), i, static_cast<int32_t>(t.GetDType()), t.RawData(),
                                               static_cast<size_t>(t.Numel())));
    return t;
  }
  template <typename T>
  T Attr(const std::string& name) const {
    return sdk_detail::ReadAttr<T>(sdk_detail::CheckPtr(Api().infer_op(c_)), name);
  }

 private:
  static bool Flag(int32_t v) {
    if (v < 0) sdk_detail::ThrowApiError();
    return v != 0;
  }
  nabla_infer_context* c_;
  mutable std::optional<OpDesc> op_;
};

using InferShapeFn = std::function<void(InferShapeContext&)>;

// ---------------------------------------------------------------- kernels

class ExecutionContext {
 public:
  explicit ExecutionContext(nabla_kernel_context* c) : c_(c) {}
  const OpDesc& Op() const {
    if (!op_) op_ = OpDesc::FromC(sdk_detail::CheckPtr(Api().kernel_op(c_)));
    return *op_;
  }
  bool HasInput(const std::string& slot) const { return InputSize(slot) != 0; }
  bool HasOutput(const std::string& slot) const { return OutputSize(slot) != 0; }
  size_t InputSize(const std::string& slot) const { return Api().kernel_count(c_, 0, slot.c_str()); }
  size_t OutputSize(const std::string& slot) const { return Api().kernel_count(c_, 1, slot.c_str()); }
  // The tensor of input slot[i]; an absent input is an error naming it.
  const Tensor& Input(const std::string& slot, size_t i = 0) const {
    return *reinterpret_cast<const Tensor*>(sdk_detail::CheckPtr(Api().kernel_input(c_, slot.c_str(), i)));
  }
  // Null when the slot is absent or the arg is @EMPTY@ (a gradient nobody needs).
  Tensor* Output(const std::string& slot, size_t i = 0) const {
    return reinterpret_cast<Tensor*>(Api().kernel_output(c_, slot.c_str(), i));
  }
  std::vector<const Tensor*> MultiInput(const std::string& slot) const {
    std::vector<const Tensor*> out;
    for (size_t i = 0, n = InputSize(slot); i < n; ++i) out.push_back(&Input(slot, i));
    return out;
  }
  std::vector<Tensor*> MultiOutput(const std::string& slot) const {
    std::vector<Tensor*> out;
    for (size_t i = 0, n = OutputSize(slot); i < n; ++i) out.push_back(Output(slot, i));
    return out;
  }
  template <typename T>
  T Attr(const std::string& name) const {
    return sdk_detail::ReadAttr<T>(sdk_detail::CheckPtr(Api().kernel_op(c_)), name);
  }
  Device& GetDevice() const { return *reinterpret_cast<Device*>(sdk_detail::CheckPtr(Api().kernel_device(c_))); }
  // Input slot[i]'s values on the host, whatever its device: tensor-valued
  // attributes (nabla/opkit/attr_tensor.h).
  HostTensor InputHostTensor(const std::string& slot, size_t i = 0) const {
    const Tensor& in = Input(slot, i);
    HostTensor t(in.GetDType(), in.GetShape());
    sdk_detail::Check(Api().kernel_input_values(c_, slot.c_str(), i, static_cast<int32_t>(t.GetDType()), t.RawData(),
                                                static_cast<size_t>(t.Numel())));
    return t;
  }
  uint64_t Seed() const { return Api().kernel_seed(c_); }

 private:
  nabla_kernel_context* c_;
  mutable std::optional<OpDesc> op_;
};

using KernelFn = std::function<void(const ExecutionContext&)>;
// Picks the dtype of an op's kernel (OpBuilder::KernelDType).
using KernelDTypeFn = std::function<DType(const ExecutionContext&)>;

// ---------------------------------------------------------------- grad makers

// Builds the grad ops of one forward op. A maker may return zero, one or
// several ops of any type.
class GradOpDescMakerBase {
 public:
  GradOpDescMakerBase(const OpDesc& fwd, nabla_grad_context* g) : fwd_(fwd), g_(g) {}
  virtual ~GradOpDescMakerBase() = default;
  virtual std::vector<std::unique_ptr<OpDesc>> operator()() const = 0;

 protected:
  const std::vector<std::string>& Input(const std::string& slot) const { return fwd_.Input(slot); }
  const std::vector<std::string>& Output(const std::string& slot) const { return fwd_.Output(slot); }
  // x@GRAD for every arg of the slot; @EMPTY@ where no gradient is wanted.
  std::vector<std::string> InputGrad(const std::string& slot) const { return Grads(0, slot, Input(slot).size()); }
  std::vector<std::string> OutputGrad(const std::string& slot) const { return Grads(1, slot, Output(slot).size()); }
  std::vector<std::string> InputSlots() const { return Keys(fwd_.Inputs()); }
  std::vector<std::string> OutputSlots() const { return Keys(fwd_.Outputs()); }
  bool IsNoGradInput(const std::string& slot) const {
    const int32_t v = Api().grad_is_no_grad_input(g_, slot.c_str());
    if (v < 0) sdk_detail::ThrowApiError();
    return v != 0;
  }
  const AttributeMap& Attrs() const { return fwd_.Attrs(); }
  template <typename T>
  const T& Attr(const std::string& name) const {
    return fwd_.Attr<T>(name);
  }
  const OpDesc& ForwardOp() const { return fwd_; }

 private:
  std::vector<std::string> Grads(int32_t output, const std::string& slot, size_t n) const {
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) names.push_back(sdk_detail::CheckPtr(Api().grad_name(g_, output, slot.c_str(), i)));
    return names;
  }
  static std::vector<std::string> Keys(const VarNameMap& m) {
    std::vector<std::string> keys;
    for (const auto& kv : m) keys.push_back(kv.first);
    return keys;
  }
  const OpDesc& fwd_;
  nabla_grad_context* g_;
};

// The core's own makers, asked for by name (GradMaker<...>()).
class DefaultGradOpDescMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override { return {}; }
};
class EmptyGradOpDescMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override { return {}; }
};

using GradOpMakerFn = std::function<std::vector<std::unique_ptr<OpDesc>>(const OpDesc& fwd, nabla_grad_context* g)>;

// ---------------------------------------------------------------- gradient checks

struct GradCheckInput {
  std::string slot;
  Shape shape;
  DType dtype = DType::kFloat64;
  double low = -1.0, high = 1.0;
  std::vector<double> kinks;
  double kink_margin = 0.0;
  std::vector<double> values;
  bool check = true;
  int count = 1;
};

struct GradCheckSpec {
  std::string name;
  std::vector<GradCheckInput> inputs;
  std::vector<std::pair<std::string, int>> outputs;
  std::vector<std::string> no_grad_outputs;
  AttributeMap attrs;
  double max_relative_error = 0.005;
  double abs_threshold = 1e-3;
  double delta = 1e-5;
};

// ---------------------------------------------------------------- registration

enum SlotFlags : unsigned {
  kNone = 0,
  kDuplicable = NABLA_C_SLOT_DUPLICABLE,
  kDispensable = NABLA_C_SLOT_DISPENSABLE,
  kNoBuffer = NABLA_C_SLOT_NO_BUFFER,
  kNoGrad = NABLA_C_SLOT_NO_GRAD,
};

enum class OpPrecision { kFollowInputs, kLow, kFloat32 };

namespace sdk_detail {

inline int32_t InferTrampoline(const nabla_api*, void* user, nabla_infer_context* c) {
  return Guard([&] {
    InferShapeContext ctx(c);
    (*static_cast<const InferShapeFn*>(user))(ctx);
  });
}

inline int32_t KernelTrampoline(const nabla_api*, void* user, nabla_kernel_context* c) {
  return Guard([&] { (*static_cast<const KernelFn*>(user))(ExecutionContext(c)); });
}

inline int32_t KernelDTypeTrampoline(const nabla_api*, void* user, nabla_kernel_context* c, int32_t* dtype) {
  return Guard([&] { *dtype = static_cast<int32_t>((*static_cast<const KernelDTypeFn*>(user))(ExecutionContext(c))); });
}

using OutputCountFn = std::function<int(const OpDesc& op)>;
inline int32_t OutputCountTrampoline(const nabla_api*, void* user, const nabla_op* op, int32_t* count) {
  return Guard([&] { *count = (*static_cast<const OutputCountFn*>(user))(OpDesc::FromC(op)); });
}

// Copies an op built in C++ into the op the core is building.
inline void FillNewOp(nabla_new_op* out, const OpDesc& op) {
  const nabla_api& api = Api();
  for (int32_t output = 0; output < 2; ++output) {
    for (const auto& [slot, args] : output ? op.Outputs() : op.Inputs()) {
      std::vector<const char*> names;
      for (const std::string& a : args) names.push_back(a.c_str());
      Check(api.new_op_set_args(out, output, slot.c_str(), names.data(), names.size()));
    }
  }
  for (const auto& [name, value] : op.Attrs()) {
    CAttr c(value);
    Check(api.new_op_set_attr(out, name.c_str(), &c.value));
  }
}

inline int32_t GradTrampoline(const nabla_api*, void* user, nabla_grad_context* g) {
  return Guard([&] {
    const nabla_api& api = Api();
    const OpDesc fwd = OpDesc::FromC(CheckPtr(api.grad_forward_op(g)));
    const std::vector<std::unique_ptr<OpDesc>> ops = (*static_cast<const GradOpMakerFn*>(user))(fwd, g);
    for (const std::unique_ptr<OpDesc>& op : ops)
      if (op) FillNewOp(CheckPtr(api.grad_new_op(g, op->Type().c_str())), *op);
  });
}

// ---- fusion patterns

// A fusion pattern's view of the chain's block: its ops and vars, read
// through the C ABI when asked (only in a pattern's applies).
class VarDesc {
 public:
  VarDesc(std::string name, int32_t dtype, Shape shape)
      : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)) {}
  const std::string& Name() const { return name_; }
  bool HasDType() const { return dtype_ >= 0; }
  DType GetDType() const { return static_cast<DType>(dtype_ < 0 ? 0 : dtype_); }
  const Shape& GetShape() const { return shape_; }

 private:
  std::string name_;
  int32_t dtype_;
  Shape shape_;
};

class BlockDesc {
 public:
  explicit BlockDesc(nabla_fusion_context* c) : c_(c) {}
  // The var, looked up through the enclosing blocks; null when there is none.
  const VarDesc* FindVarRecursive(const std::string& name) const {
    auto it = vars_.find(name);
    if (it != vars_.end()) return it->second.get();
    std::unique_ptr<VarDesc>& v = vars_[name];
    const int64_t rank = Api().fusion_var_rank(c_, name.c_str());
    if (rank >= 0) {
      Shape shape(static_cast<size_t>(rank));
      Check(Api().fusion_var_dims(c_, name.c_str(), shape.data()));
      v = std::make_unique<VarDesc>(name, Api().fusion_var_dtype(c_, name.c_str()), std::move(shape));
    }
    return v.get();
  }
  const std::vector<std::unique_ptr<OpDesc>>& AllOps() const {
    if (!ops_) {
      ops_.emplace();
      for (size_t i = 0, n = Api().fusion_block_op_count(c_); i < n; ++i)
        ops_->push_back(std::make_unique<OpDesc>(OpDesc::FromC(CheckPtr(Api().fusion_block_op(c_, i)))));
    }
    return *ops_;
  }

 private:
  nabla_fusion_context* c_;
  mutable std::map<std::string, std::unique_ptr<VarDesc>> vars_;
  mutable std::optional<std::vector<std::unique_ptr<OpDesc>>> ops_;
};

}  // namespace sdk_detail

using sdk_detail::BlockDesc;
using sdk_detail::VarDesc;

// A chain of op types an op replaces (OpBuilder::Fuses), as in nabla's tree:
// `fuse` builds the replacing op from the matched ops (chain order), or
// returns null to leave the match alone; `applies`, optional and asked
// first, says whether the matched chain may be fused at all.
struct FusionPattern {
  using Fuse = std::function<std::unique_ptr<OpDesc>(const std::vector<const OpDesc*>& matched)>;
  using Applies = std::function<bool(const BlockDesc& block, const std::vector<const OpDesc*>& matched)>;
  FusionPattern(std::vector<std::string> chain, Fuse fuse, Applies applies = nullptr)
      : chain(std::move(chain)), fuse(std::move(fuse)), applies(std::move(applies)) {}
  std::vector<std::string> chain;
  Fuse fuse;
  Applies applies;
};

namespace sdk_detail {

inline std::vector<OpDesc> Matched(nabla_fusion_context* c) {
  std::vector<OpDesc> ops;
  for (size_t i = 0, n = Api().fusion_match_count(c); i < n; ++i)
    ops.push_back(OpDesc::FromC(CheckPtr(Api().fusion_match(c, i))));
  return ops;
}
inline std::vector<const OpDesc*> Pointers(const std::vector<OpDesc>& ops) {
  std::vector<const OpDesc*> p;
  for (const OpDesc& op : ops) p.push_back(&op);
  return p;
}
inline int32_t FuseTrampoline(const nabla_api*, void* user, nabla_fusion_context* c) {
  return Guard([&] {
    const std::vector<OpDesc> matched = Matched(c);
    const std::unique_ptr<OpDesc> op = static_cast<const FusionPattern*>(user)->fuse(Pointers(matched));
    if (op) FillNewOp(CheckPtr(Api().fusion_new_op(c, op->Type().c_str())), *op);
  });
}
inline int32_t FuseAppliesTrampoline(const nabla_api*, void* user, nabla_fusion_context* c, int32_t* applies) {
  return Guard([&] {
    const std::vector<OpDesc> matched = Matched(c);
    *applies = static_cast<const FusionPattern*>(user)->applies(BlockDesc(c), Pointers(matched)) ? 1 : 0;
  });
}

using CheckerFn = std::function<void(const Attribute&)>;
inline int32_t CheckerTrampoline(const nabla_api*, void* user, const nabla_attr_value* v) {
  return Guard([&] { (*static_cast<const CheckerFn*>(user))(FromC(*v)); });
}

// Callbacks live as long as the process: plugins are never unloaded.
template <typename F>
void* Keep(F f) {
  return new F(std::move(f));
}

}  // namespace sdk_detail

class OpBuilder {
 public:
  explicit OpBuilder(nabla_op_builder* b) : b_(b) {}
  OpBuilder& Doc(const std::string& doc) {
    sdk_detail::Check(Api().op_doc(b_, doc.c_str()));
    return *this;
  }
  OpBuilder& Input(const std::string& name, const std::string& doc, unsigned flags = kNone) {
    sdk_detail::Check(Api().op_input(b_, name.c_str(), doc.c_str(), flags));
    return *this;
  }
  OpBuilder& Output(const std::string& name, const std::string& doc, unsigned flags = kNone) {
    sdk_detail::Check(Api().op_output(b_, name.c_str(), doc.c_str(), flags));
    return *this;
  }
  template <typename T>
  OpBuilder& Attr(const std::string& name, T default_value, const std::string& doc,
                  std::function<void(const T&)> checker = nullptr) {
    const Attribute value(std::move(default_value));
    sdk_detail::CAttr c(value);
    return AddAttr(name, AttrTypeOf<T>::value, &c.value, doc, Wrap(std::move(checker)));
  }
  template <typename T>
  OpBuilder& RequiredAttr(const std::string& name, const std::string& doc,
                          std::function<void(const T&)> checker = nullptr) {
    return AddAttr(name, AttrTypeOf<T>::value, nullptr, doc, Wrap(std::move(checker)));
  }
  OpBuilder& InferShape(InferShapeFn fn) {
    sdk_detail::Check(Api().op_infer_shape(b_, sdk_detail::InferTrampoline, sdk_detail::Keep(std::move(fn))));
    return *this;
  }
  // Which kernel runs, where the first input's dtype does not tell.
  OpBuilder& KernelDType(KernelDTypeFn fn) {
    sdk_detail::Check(Api().op_kernel_dtype(b_, sdk_detail::KernelDTypeTrampoline, sdk_detail::Keep(std::move(fn))));
    return *this;
  }
  // How many vars duplicable output `slot` gets (-1: the op does not tell).
  OpBuilder& OutputCount(const std::string& slot, std::function<int(const OpDesc& op)> fn) {
    sdk_detail::Check(
        Api().op_output_count(b_, slot.c_str(), sdk_detail::OutputCountTrampoline, sdk_detail::Keep(std::move(fn))));
    return *this;
  }
  // This op replaces `pattern`'s chain where the fusion pass finds it.
  OpBuilder& Fuses(FusionPattern pattern) {
    const auto* kept = static_cast<const FusionPattern*>(sdk_detail::Keep(std::move(pattern)));
    std::vector<const char*> chain;
    for (const std::string& t : kept->chain) chain.push_back(t.c_str());
    sdk_detail::Check(Api().op_fuses(b_, chain.data(), chain.size(), sdk_detail::FuseTrampoline,
                                     kept->applies ? sdk_detail::FuseAppliesTrampoline : nullptr,
                                     const_cast<FusionPattern*>(kept)));
    return *this;
  }
  OpBuilder& GradMaker(GradOpMakerFn fn) {
    sdk_detail::Check(Api().op_grad_maker(b_, sdk_detail::GradTrampoline, sdk_detail::Keep(std::move(fn))));
    return *this;
  }
  template <typename Maker>
  OpBuilder& GradMaker() {
    if constexpr (std::is_same_v<Maker, DefaultGradOpDescMaker>) {
      sdk_detail::Check(Api().op_grad_maker_default(b_));
    } else if constexpr (std::is_same_v<Maker, EmptyGradOpDescMaker>) {
      sdk_detail::Check(Api().op_grad_maker_none(b_));
    } else {
      GradMaker([](const OpDesc& fwd, nabla_grad_context* g) { return Maker(fwd, g)(); });
    }
    return *this;
  }
  OpBuilder& GradCheck(const GradCheckSpec& spec) {
    std::vector<nabla_grad_check_input> inputs;
    for (const GradCheckInput& in : spec.inputs) {
      nabla_grad_check_input c{};
      c.struct_size = sizeof c;
      c.dtype = static_cast<int32_t>(in.dtype);
      c.slot = in.slot.c_str();
      c.dims = in.shape.data();
      c.rank = in.shape.size();
      c.low = in.low;
      c.high = in.high;
      c.kinks = in.kinks.data();
      c.kink_count = in.kinks.size();
      c.kink_margin = in.kink_margin;
      c.values = in.values.empty() ? nullptr : in.values.data();
      c.value_count = in.values.size();
      c.check = in.check ? 1 : 0;
      c.count = in.count;
      inputs.push_back(c);
    }
    std::vector<const char*> output_slots, no_grad, attr_names;
    std::vector<int32_t> output_counts;
    for (const auto& [slot, n] : spec.outputs) {
      output_slots.push_back(slot.c_str());
      output_counts.push_back(n);
    }
    for (const std::string& s : spec.no_grad_outputs) no_grad.push_back(s.c_str());
    std::deque<sdk_detail::CAttr> attrs;
    std::vector<nabla_attr_value> attr_values;
    for (const auto& [name, value] : spec.attrs) {
      attr_names.push_back(name.c_str());
      attrs.emplace_back(value);
      attr_values.push_back(attrs.back().value);
    }
    nabla_grad_check c{};
    c.struct_size = sizeof c;
    c.name = spec.name.c_str();
    c.inputs = inputs.data();
    c.input_count = inputs.size();
    c.output_slots = output_slots.data();
    c.output_counts = output_counts.data();
    c.output_count = output_slots.size();
    c.no_grad_outputs = no_grad.data();
    c.no_grad_output_count = no_grad.size();
    c.attr_names = attr_names.data();
    c.attr_values = attr_values.data();
    c.attr_count = attr_names.size();
    c.max_relative_error = spec.max_relative_error;
    c.abs_threshold = spec.abs_threshold;
    c.delta = spec.delta;
    sdk_detail::Check(Api().op_grad_check(b_, &c));
    return *this;
  }
  OpBuilder& Random() { return Traits(NABLA_C_TRAIT_RANDOM); }
  OpBuilder& ArrayIO() { return Traits(NABLA_C_TRAIT_ARRAY_IO); }
  OpBuilder& Collective() { return Traits(NABLA_C_TRAIT_COLLECTIVE); }
  OpBuilder& UpdatesInPlace() { return Traits(NABLA_C_TRAIT_UPDATES_IN_PLACE); }
  OpBuilder& DTypeCast() { return Traits(NABLA_C_TRAIT_DTYPE_CAST); }
  OpBuilder& Precision(OpPrecision p) {
    precision_ = p;
    return Traits(0);
  }

 private:
  template <typename T>
  static sdk_detail::CheckerFn Wrap(std::function<void(const T&)> c) {
    if (!c) return nullptr;
    return [c](const Attribute& a) { c(std::get<T>(a)); };
  }
  OpBuilder& AddAttr(const std::string& name, AttrType type, const nabla_attr_value* def, const std::string& doc,
                     sdk_detail::CheckerFn checker) {
    // Decided before the move: argument evaluation order is unspecified.
    const nabla_attr_check_fn trampoline = checker ? sdk_detail::CheckerTrampoline : nullptr;
    void* user = checker ? sdk_detail::Keep(std::move(checker)) : nullptr;
    sdk_detail::Check(Api().op_attr(b_, name.c_str(), static_cast<int32_t>(type), def, doc.c_str(), trampoline, user));
    return *this;
  }
  OpBuilder& Traits(uint32_t traits) {
    sdk_detail::Check(Api().op_traits(b_, traits, static_cast<int32_t>(precision_)));
    return *this;
  }
  nabla_op_builder* b_;
  OpPrecision precision_ = OpPrecision::kFollowInputs;
};

// The staging area of one plugin load: nothing it holds is visible until
// the whole plugin has registered and validated.
class Registrar {
 public:
  explicit Registrar(nabla_registrar* r) : r_(r) {}
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  OpBuilder& Op(const std::string& type, const char* file = "", int line = 0) {
    builders_.emplace_back(sdk_detail::CheckPtr(Api().op_new(r_, type.c_str(), file, line)));
    return builders_.back();
  }
  // A grad op whose slots follow the default grad maker of `fwd_type`.
  OpBuilder& DefaultGradOp(const std::string& fwd_type, const char* file = "", int line = 0) {
    builders_.emplace_back(sdk_detail::CheckPtr(Api().op_new_default_grad(r_, fwd_type.c_str(), file, line)));
    return builders_.back();
  }
  void Kernel(const std::string& type, DeviceType device, DType dtype, KernelFn fn, const char* file = "",
              int line = 0) {
    sdk_detail::Check(Api().kernel(r_, type.c_str(), static_cast<int32_t>(device), static_cast<int32_t>(dtype),
                                   sdk_detail::KernelTrampoline, sdk_detail::Keep(std::move(fn)), file, line));
  }
  // Registers a device backend; returns its device type, for kernels. A
  // plugin may register kernels on it for the ops of other plugins too.
  DeviceType DeviceBackend(DeviceBackendSpec spec) {
    NABLA_ENFORCE(spec.enumerate && spec.open, kInvalidArgument, "device backend '", spec.name,
                  "': expected enumerate and open functions");
    const auto* kept = static_cast<const DeviceBackendSpec*>(sdk_detail::Keep(std::move(spec)));
    nabla_device_backend b{};
    b.struct_size = sizeof b;
    b.flags = kept->host_fallback ? uint32_t{NABLA_C_DEVICE_HOST_FALLBACK} : 0u;
    b.name = kept->name.c_str();
    b.none_found = kept->none_found.c_str();
    b.user = const_cast<DeviceBackendSpec*>(kept);
    b.enumerate = sdk_detail::EnumerateTrampoline;
    b.open = sdk_detail::OpenTrampoline;
    b.allocate = sdk_detail::AllocateTrampoline;
    b.deallocate = sdk_detail::DeallocateTrampoline;
    b.copy_from_host = sdk_detail::FromHostTrampoline;
    b.copy_to_host = sdk_detail::ToHostTrampoline;
    b.copy_on_device = sdk_detail::OnDeviceTrampoline;
    b.synchronize = sdk_detail::SynchronizeTrampoline;
    const int32_t id = Api().device_backend(r_, &b);
    if (id < 0) sdk_detail::ThrowApiError();
    sdk_detail::OwnDeviceTypes().push_back(id);
    return static_cast<DeviceType>(id);
  }

 private:
  nabla_registrar* r_;
  std::deque<OpBuilder> builders_;  // stable addresses for the returned builders
};

namespace plugin_detail {
using RegisterFn = void (*)(Registrar&);
inline std::vector<RegisterFn>& LocalRegistrations() {
  static std::vector<RegisterFn> list;
  return list;
}
struct AddRegistration {
  explicit AddRegistration(RegisterFn fn) { LocalRegistrations().push_back(fn); }
};
// nabla_plugin_init's body: checks the table, then runs the registrations.
inline int32_t Init(const nabla_api* api, nabla_registrar* r) noexcept {
  if (!api || api->struct_size < sizeof(nabla_api)) return NABLA_C_ERROR;
  sdk_detail::ApiSlot() = api;
  return sdk_detail::Guard([&] {
    Registrar registrar(r);
    for (RegisterFn fn : LocalRegistrations()) fn(registrar);
  });
}
}  // namespace plugin_detail

}  // namespace c_sdk
}  // namespace nabla

#ifndef NABLA_PLUGIN_VERSION
#define NABLA_PLUGIN_VERSION "0"
#endif

#define NABLA_REGISTER_OPS(unique_name)                                                      \
  static void nabla_register_ops_##unique_name(::nabla::Registrar& registrar);               \
  static const ::nabla::plugin_detail::AddRegistration nabla_add_registration_##unique_name( \
      &nabla_register_ops_##unique_name);                                                    \
  static void nabla_register_ops_##unique_name(::nabla::Registrar& registrar)

// The plugin's manifest and entry point (nabla/c_api.h). Use once per plugin.
#define NABLA_PLUGIN(plugin_name)                                                              \
  NABLA_C_EXPORT int32_t nabla_plugin_init(const nabla_api* api, nabla_registrar* registrar) { \
    return ::nabla::plugin_detail::Init(api, registrar);                                       \
  }                                                                                            \
  NABLA_C_EXPORT const nabla_plugin_manifest nabla_plugin_manifest_v1 = {                      \
      NABLA_C_PLUGIN_MAGIC, NABLA_C_API_VERSION, static_cast<uint32_t>(sizeof(nabla_api)), 0,  \
      plugin_name,          NABLA_PLUGIN_VERSION}
