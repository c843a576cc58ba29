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
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "nabla/attr_text.h"
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
// The dtype named `name` ("float32", ..., DTypeName's names); false if none.
inline bool ParseDType(const std::string& name, DType* out) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool, DType::kBFloat16}) {
    if (name == DTypeName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
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

// What a var holds (C ABI version 5): a tensor, a tensor array, or the
// scopes a control-flow op kept for its gradient.
enum class VarType { kDense, kTensorArray, kStepScopes };
inline const char* VarTypeName(VarType type) {
  static const char* const names[] = {"dense", "tensor_array", "step_scopes"};
  const int i = static_cast<int>(type);
  return i >= 0 && i < 3 ? names[i] : "unknown";
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

// Attributes: the core's alternatives. A block reference (a control-flow
// op's sub_block: a block of the op's program) is part of the C ABI since
// version 6.
struct BlockRef {
  int idx = -1;
  bool operator==(const BlockRef& o) const { return idx == o.idx; }
};
enum class AttrType { kInt, kFloat, kString, kBool, kInts, kFloats, kStrings, kBools, kBlock };
using Attribute = std::variant<int, float, std::string, bool, std::vector<int>, std::vector<float>,
                               std::vector<std::string>, std::vector<bool>, BlockRef>;
using AttributeMap = std::map<std::string, Attribute>;
// A value as the core's AttrToString writes it (nabla/attr_text.h).
inline std::string AttrToString(const Attribute& a) {
  std::ostringstream os;
  std::visit(
      [&os](const auto& v) {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, BlockRef>) {
          os << "block " << v.idx;
        } else {
          attr_text::Put(os, v);
        }
      },
      a);
  return os.str();
}
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
                "not an attribute type of the C ABI (int, float, string, bool, a vector of one, or BlockRef)");
  static constexpr AttrType value = static_cast<AttrType>(sdk_detail::IndexIn<T, Attribute>::Find());
};
// The AttrType of a value, and its name ("int", "floats"), as the core's.
inline AttrType TypeOf(const Attribute& a) { return static_cast<AttrType>(a.index()); }
inline const char* AttrTypeName(AttrType type) {
  static const char* const kNames[] = {"int", "float", "string", "bool", "ints", "floats", "strings", "bools", "block"};
  const size_t i = static_cast<size_t>(type);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "?";
}

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
    case NABLA_C_ATTR_BLOCK:
      return BlockRef{static_cast<int>(v.i)};
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
          } else if constexpr (std::is_same_v<X, BlockRef>) {
            value.i = x.idx;
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

namespace sdk_detail {
class BlockDesc;
struct PassAccess;
}  // namespace sdk_detail
class ProgramDesc;

// Where something came from in a program's YAML (1-based; 0: unknown).
struct SourcePos {
  int line = 0;
  int col = 0;
};

// An op: the value a grad maker builds and returns, a copy of the op a
// context is about, and, inside a program pass (ProgramPass), an op of the
// program being edited: its changes reach the core's program when the pass
// returns. A copy is never part of a program.
class OpDesc {
 public:
  OpDesc() = default;
  OpDesc(std::string type, VarNameMap inputs, VarNameMap outputs, AttributeMap attrs)
      : type_(std::move(type)), inputs_(std::move(inputs)), outputs_(std::move(outputs)), attrs_(std::move(attrs)) {}
  OpDesc(const OpDesc& o) : type_(o.type_), inputs_(o.inputs_), outputs_(o.outputs_), attrs_(o.attrs_), pos_(o.pos_) {}
  OpDesc& operator=(const OpDesc& o) {
    if (this == &o) return *this;
    Touch();
    type_ = o.type_;
    inputs_ = o.inputs_;
    outputs_ = o.outputs_;
    attrs_ = o.attrs_;
    pos_ = o.pos_;
    return *this;
  }

  const std::string& Type() const { return type_; }
  void SetType(std::string t) {
    Touch();
    type_ = std::move(t);
  }
  const VarNameMap& Inputs() const { return inputs_; }
  const VarNameMap& Outputs() const { return outputs_; }
  VarNameMap& MutableInputs() {
    Touch();
    return inputs_;
  }
  VarNameMap& MutableOutputs() {
    Touch();
    return outputs_;
  }
  const std::vector<std::string>& Input(const std::string& slot) const { return Args(inputs_, slot); }
  const std::vector<std::string>& Output(const std::string& slot) const { return Args(outputs_, slot); }
  bool HasInput(const std::string& slot) const { return inputs_.count(slot) != 0; }
  bool HasOutput(const std::string& slot) const { return outputs_.count(slot) != 0; }
  void SetInput(const std::string& slot, std::vector<std::string> args) {
    Touch();
    inputs_[slot] = std::move(args);
  }
  void SetOutput(const std::string& slot, std::vector<std::string> args) {
    Touch();
    outputs_[slot] = std::move(args);
  }
  // Every argument over all slots, in slot order.
  std::vector<std::string> InputArgumentNames() const { return AllArgs(inputs_); }
  std::vector<std::string> OutputArgumentNames() const { return AllArgs(outputs_); }
  // Renames an argument everywhere it appears in this op.
  void RenameInput(const std::string& from, const std::string& to) { Rename(MutableInputs(), from, to); }
  void RenameOutput(const std::string& from, const std::string& to) { Rename(MutableOutputs(), from, to); }
  const AttributeMap& Attrs() const { return attrs_; }
  AttributeMap& MutableAttrs() {
    Touch();
    return attrs_;
  }
  bool HasAttr(const std::string& name) const { return attrs_.count(name) != 0; }
  void SetAttr(const std::string& name, Attribute value) {
    Touch();
    attrs_[name] = std::move(value);
  }
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
  const SourcePos& Pos() const { return pos_; }
  void SetPos(SourcePos p) {
    Touch();
    pos_ = p;
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
      int32_t block = -1;
      // op_get_attr refuses a block attribute (version 6 reads it apart).
      if (api.op_get_attr(op, name, &v) == NABLA_C_OK) {
        d.attrs_[name] = sdk_detail::FromC(v);
      } else {
        sdk_detail::Check(api.op_get_block_attr(op, name, &block));
        d.attrs_[name] = BlockRef{block};
      }
    }
    sdk_detail::Check(api.op_pos(op, &d.pos_.line, &d.pos_.col));
    return d;
  }

 private:
  friend class sdk_detail::BlockDesc;
  friend class ProgramDesc;
  friend struct sdk_detail::PassAccess;
  static const std::vector<std::string>& Args(const VarNameMap& m, const std::string& slot) {
    static const std::vector<std::string> kNone;
    auto it = m.find(slot);
    return it == m.end() ? kNone : it->second;
  }
  static std::vector<std::string> AllArgs(const VarNameMap& m) {
    std::vector<std::string> out;
    for (const auto& kv : m) out.insert(out.end(), kv.second.begin(), kv.second.end());
    return out;
  }
  static void Rename(VarNameMap& m, const std::string& from, const std::string& to) {
    for (auto& kv : m)
      for (std::string& a : kv.second)
        if (a == from) a = to;
  }
  // An op of a pass's program remembers, at its first change, what the
  // core holds, so that the pass's end sends only the difference.
  void Touch() {
    if (!in_program_ || synced_) return;
    synced_ = std::make_unique<OpDesc>(*this);
  }
  std::string type_;
  VarNameMap inputs_, outputs_;
  AttributeMap attrs_;
  SourcePos pos_;
  bool in_program_ = false;         // an op of a pass's program (never copied)
  std::unique_ptr<OpDesc> synced_;  // the core's op, when this one changed since
};

namespace sdk_detail {
// Attribute `name`, read into v, as T; `op` gives the handle of its op for
// an error (asked for only then).
template <typename T, typename OpFn>
T AttrAs(const nabla_attr_value& v, const std::string& name, OpFn&& op) {
  // A scalar straight from the C value, as FromC converts it (kernels read
  // some on every call); anything else, or a scalar of another type (whose
  // error comes below), through an Attribute.
  if constexpr (std::is_same_v<T, float>) {
    if (v.type == NABLA_C_ATTR_FLOAT) return static_cast<float>(v.f);
  } else if constexpr (std::is_same_v<T, int>) {
    if (v.type == NABLA_C_ATTR_INT) return static_cast<int>(v.i);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v.type == NABLA_C_ATTR_BOOL) return v.b != 0;
  }
  Attribute a = FromC(v);
  T* value = std::get_if<T>(&a);
  NABLA_ENFORCE(value, kInvalidArgument, "attribute '", name, "' of op '", Str(Api().op_type(op())),
                "' is not of the type asked for");
  return std::move(*value);
}
template <typename T>
T ReadAttr(const nabla_op* op, const std::string& name) {
  nabla_attr_value v;
  Check(Api().op_get_attr(op, name.c_str(), &v));
  return AttrAs<T>(v, name, [op] { return op; });
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
  // True when it holds data (C ABI version 5): allocated, or sharing a buffer.
  bool IsInitialized() const {
    const int32_t v = Api().tensor_initialized(Handle());
    if (v < 0) sdk_detail::ThrowApiError();
    return v == 1;
  }
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
  // The bytes, whatever the dtype (a collective packing several tensors).
  void* RawData() const { return RawData(GetDType()); }
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
  // Deep copy of src onto `device`, wherever src lives (C ABI version 4).
  void CopyFrom(const Tensor& src, Device& device) {
    sdk_detail::Check(Api().tensor_copy(Handle(), src.Handle(), device.Handle()));
  }
  std::string DebugString() const { return StrCat(DTypeName(GetDType()), ShapeToString(GetShape())); }
  // The core's `t = src` (C ABI version 5): shares src's buffer, shape and
  // dtype, with or without data; Reset() is `t = Tensor()`, an empty tensor
  // that no longer shares anything.
  void AssignFrom(const Tensor& src) { sdk_detail::Check(Api().tensor_assign(Handle(), src.Handle())); }
  void Reset() { sdk_detail::Check(Api().tensor_assign(Handle(), nullptr)); }

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

class Scope;
class Variable;
namespace sdk_detail {
// The scopes a var keeps (a step_scopes var; C ABI version 6), with the
// parts of std::vector<Scope*> the core's control-flow kernels use. A view:
// it changes the var's list.
class StepScopeList {
 public:
  explicit StepScopeList(nabla_var* v) : v_(v) {}
  size_t size() const {
    const int64_t n = Api().var_step_scope_count(v_);
    if (n < 0) ThrowApiError();
    return static_cast<size_t>(n);
  }
  bool empty() const { return size() == 0; }
  Scope* operator[](size_t i) const { return reinterpret_cast<Scope*>(CheckPtr(Api().var_step_scope(v_, i))); }
  Scope* front() const { return (*this)[0]; }
  Scope* back() const { return (*this)[size() - 1]; }
  void push_back(Scope* s) { Check(Api().var_step_scope_push(v_, reinterpret_cast<nabla_scope*>(s))); }
  void pop_back() { Check(Api().var_step_scopes_truncate(v_, size() - 1)); }
  void clear() { Check(Api().var_step_scopes_truncate(v_, 0)); }
  // Index-based: deleting the scopes a loop visits leaves the list alone.
  class iterator {
   public:
    iterator(const StepScopeList* l, size_t i) : l_(l), i_(i) {}
    Scope* operator*() const { return (*l_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    const StepScopeList* l_;
    size_t i_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, size()); }

 private:
  nabla_var* v_;
};
}  // namespace sdk_detail

// A var as a kernel sees it (ExecutionContext::InputVar, OutputVar): its
// tensor, with or without data, its type, and a tensor array's entries
// (C ABI version 5). A handle like Tensor; an input's var is read only,
// except for the scopes it keeps, which a grad op consumes.
class Variable {
 public:
  Variable() = delete;
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;
  VarType Type() const {
    const int32_t t = Api().var_type(Handle());
    if (t < 0) sdk_detail::ThrowApiError();
    return static_cast<VarType>(t);
  }
  void SetType(VarType t) { sdk_detail::Check(Api().var_set_type(Handle(), static_cast<int32_t>(t))); }
  const Tensor& GetTensor() const {
    return *reinterpret_cast<const Tensor*>(sdk_detail::CheckPtr(Api().var_tensor(MutableHandle())));
  }
  Tensor& GetTensor() { return *reinterpret_cast<Tensor*>(sdk_detail::CheckPtr(Api().var_tensor(Handle()))); }
  // A tensor array's length, its entry i, and resizing it (new entries
  // hold no data); an error for a var of another type.
  size_t ArraySize() const {
    const int64_t n = Api().var_array_size(Handle());
    if (n < 0) sdk_detail::ThrowApiError();
    return static_cast<size_t>(n);
  }
  const Tensor& ArrayEntry(size_t i) const {
    return *reinterpret_cast<const Tensor*>(sdk_detail::CheckPtr(Api().var_array_entry(MutableHandle(), i)));
  }
  Tensor& ArrayEntry(size_t i) {
    return *reinterpret_cast<Tensor*>(sdk_detail::CheckPtr(Api().var_array_entry(Handle(), i)));
  }
  void ResizeArray(size_t n) { sdk_detail::Check(Api().var_array_resize(Handle(), n)); }
  // The scopes the var keeps (C ABI version 6).
  sdk_detail::StepScopeList GetStepScopes() const { return sdk_detail::StepScopeList(MutableHandle()); }

  const nabla_var* Handle() const { return reinterpret_cast<const nabla_var*>(this); }
  nabla_var* Handle() { return reinterpret_cast<nabla_var*>(this); }

 private:
  nabla_var* MutableHandle() const { return const_cast<nabla_var*>(Handle()); }
};

// A var of no scope, the kernel's own (C ABI version 6): what
// std::make_shared<Variable>() makes in the core.
inline std::shared_ptr<Variable> NewVariable() {
  nabla_var* v = sdk_detail::CheckPtr(Api().var_new());
  return std::shared_ptr<Variable>(reinterpret_cast<Variable*>(v),
                                   [](Variable* p) { Api().var_free(reinterpret_cast<nabla_var*>(p)); });
}

// A scope of the run (C ABI version 6): the kernel's (ExecutionContext::
// GetScope) and the child scopes a control-flow kernel makes. A handle.
class Scope {
 public:
  Scope() = delete;
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  // The var, in this scope or an enclosing one; null when there is none.
  Variable* FindVar(const std::string& name) const { return Find(name, 0); }
  Variable* FindLocalVar(const std::string& name) const { return Find(name, 1); }
  // The var of this scope, created (dense, no value) when absent.
  Variable* Var(const std::string& name) {
    return reinterpret_cast<Variable*>(sdk_detail::CheckPtr(Api().scope_var(Handle(), name.c_str())));
  }
  // A new child scope, owned by this one until DeleteScope.
  Scope& NewScope() { return *reinterpret_cast<Scope*>(sdk_detail::CheckPtr(Api().scope_new_child(Handle()))); }
  // Deletes a child scope; anything else is left alone.
  void DeleteScope(Scope* child) {
    sdk_detail::Check(Api().scope_delete_child(Handle(), reinterpret_cast<nabla_scope*>(child)));
  }

  nabla_scope* Handle() const { return reinterpret_cast<nabla_scope*>(const_cast<Scope*>(this)); }

 private:
  Variable* Find(const std::string& name, int32_t local) const {
    nabla_var* v = Api().scope_find_var(Handle(), name.c_str(), local);
    return reinterpret_cast<Variable*>(v);
  }
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
  // What input slot[i] holds (C ABI version 5).
  VarType InputVarType(const std::string& slot, size_t i = 0) const {
    const int32_t t = Api().infer_input_var_type(c_, slot.c_str(), i);
    if (t < 0) sdk_detail::ThrowApiError();
    return static_cast<VarType>(t);
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

// The run's options a kernel reads (C ABI version 6), as the core's.
struct ExecutorOptions {
  int threads = 0;    // 0: all cores
  uint64_t seed = 0;  // base for ops whose `seed` attribute is 0
  int64_t max_loop_iterations = 1000000;
};
// What a control-flow kernel knows of its run (ExecutionContext::Run; C ABI
// version 6): the program, read only, and the options.
struct RunContext {
  const ProgramDesc* program = nullptr;
  const ExecutorOptions* options = nullptr;
};

namespace sdk_detail {
// This thread's copies of the ops its kernels asked for (ExecutionContext::
// Op), by op_version (C ABI version 7): an op is copied once, not on every
// call of its kernel (matmul, mean, reshape and adam name their op in
// messages they build up front, and a copy is some 30 table calls). A fixed
// number, replaced as they collide; shared, so a kernel keeps its copy while
// a block it runs replaces the entry.
inline std::shared_ptr<const OpDesc> CachedOp(const nabla_op* op) {
  const uint64_t version = Api().op_version(op);
  if (version == 0) ThrowApiError();
  SourcePos pos;
  Check(Api().op_pos(op, &pos.line, &pos.col));  // not part of the version
  struct Entry {
    uint64_t version = 0;
    std::shared_ptr<const OpDesc> op;
  };
  static thread_local Entry cache[64];
  Entry& e = cache[version % 64];
  if (e.version == version && e.op->Pos().line == pos.line && e.op->Pos().col == pos.col) return e.op;
  auto copy = std::make_shared<const OpDesc>(OpDesc::FromC(op));
  e.version = version;
  e.op = copy;
  return copy;
}
}  // namespace sdk_detail

class ExecutionContext {
 public:
  explicit ExecutionContext(nabla_kernel_context* c) : c_(c) {}
  const OpDesc& Op() const {
    if (!op_) op_ = sdk_detail::CachedOp(sdk_detail::CheckPtr(Api().kernel_op(c_)));
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
  // The var of input slot[i], whose tensor may hold no data: the shape and
  // dtype of a kNoBuffer input, whose buffer an executor may have released
  // (C ABI version 4). An absent input is an error naming it. Read only but
  // for the scopes it keeps (a grad op consumes them), as the core's.
  Variable* InputVar(const std::string& slot, size_t i = 0) const {
    return reinterpret_cast<Variable*>(sdk_detail::CheckPtr(Api().kernel_var(c_, 0, slot.c_str(), i)));
  }
  // The var of output slot[i] (C ABI version 5); null when the slot is
  // absent or the arg is @EMPTY@, as Output.
  Variable* OutputVar(const std::string& slot, size_t i = 0) const {
    const std::vector<std::string>& args = Op().Output(slot);
    if (i >= args.size() || args[i] == kEmptyVarName) return nullptr;
    return reinterpret_cast<Variable*>(sdk_detail::CheckPtr(Api().kernel_var(c_, 1, slot.c_str(), i)));
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
    // From what the executor prepared for the op (C ABI version 7): no
    // strlen, no walk of the op's attribute map.
    nabla_attr_value v;
    sdk_detail::Check(Api().kernel_attr(c_, name.data(), name.size(), &v));
    return sdk_detail::AttrAs<T>(v, name, [this] { return Api().kernel_op(c_); });
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
  // Control flow (C ABI version 6): the scope the kernel runs in, the run
  // (null when no executor started the op), and running one of the
  // program's blocks in a scope under the kernel's.
  Scope& GetScope() const { return *reinterpret_cast<Scope*>(sdk_detail::CheckPtr(Api().kernel_scope(c_))); }
  const RunContext* Run() const;
  void RunBlock(int block_idx, Scope& scope) const {
    sdk_detail::Check(Api().kernel_run_block(c_, block_idx, scope.Handle()));
  }

 private:
  struct RunState;
  nabla_kernel_context* c_;
  mutable std::shared_ptr<const OpDesc> op_;
  mutable std::shared_ptr<RunState> run_;
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
  // The grad block the backward builder made for the op's i-th block
  // attribute, in a read-only view of the program (C ABI version 6).
  const sdk_detail::BlockDesc* GradBlock(size_t i = 0) const;

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
  mutable std::shared_ptr<ProgramDesc> program_;
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

// ---- blocks and programs
//
// Two views of a program through the C ABI, with the core's class names:
// a fusion pattern's applies reads the chain's block (vars and ops fetched
// when asked), and a program pass (ProgramPass) edits the whole program.
// A pass's ProgramDesc holds a copy of every block, read when the pass
// starts; the pass reads the copy and edits it as it would the core's
// program. Inserting or removing ops and vars, and changing a var, reach the
// core at once; changes of an op's slots, attributes, type and position
// reach it when the pass returns. Block attributes (control flow) are part
// of the copy since C ABI version 6.

// A var of a block.
class VarDesc {
 public:
  // A var of a fusion pattern's block (dtype -1: not known yet).
  VarDesc(std::string name, int32_t dtype, Shape shape)
      : name_(std::move(name)),
        dtype_(dtype < 0 ? DType::kFloat32 : static_cast<DType>(dtype)),
        has_dtype_(dtype >= 0),
        shape_(std::move(shape)) {}
  VarDesc(const VarDesc&) = delete;
  VarDesc& operator=(const VarDesc&) = delete;

  const std::string& Name() const { return name_; }
  // What the var holds (C ABI version 5); a fusion pattern's vars are dense.
  VarType Type() const { return type_; }
  void SetType(VarType t) {
    NABLA_ENFORCE(pass_, kUnimplemented, "var '", name_, "': a fusion pattern's block is read only");
    Check(Api().pass_var_set_type(pass_, block_, name_.c_str(), static_cast<int32_t>(t)));
    type_ = t;
  }
  DType GetDType() const { return dtype_; }
  void SetDType(DType d) { Set(dtype_, d); }
  // True once a dtype was declared or inferred; inference never guesses.
  bool HasDType() const { return has_dtype_; }
  void MarkDTypeKnown(bool known = true) { Set(has_dtype_, known); }
  const Shape& GetShape() const { return shape_; }
  void SetShape(Shape s) { Set(shape_, std::move(s)); }
  bool Persistable() const { return persistable_; }
  void SetPersistable(bool p) { Set(persistable_, p); }
  bool StopGradient() const { return stop_gradient_; }
  void SetStopGradient(bool s) { Set(stop_gradient_, s); }
  // False for vars the loader or a pass created.
  bool Declared() const { return declared_; }
  void SetDeclared(bool d) { Set(declared_, d); }

 private:
  friend class BlockDesc;
  VarDesc(std::string name, nabla_pass_context* pass, size_t block)
      : name_(std::move(name)), pass_(pass), block_(block) {}
  // A pass's var reads what the core holds, and sends each change at once.
  void Load() {
    nabla_var_info info{};
    info.struct_size = sizeof info;
    Check(Api().pass_var_get(pass_, block_, name_.c_str(), &info));
    dtype_ = static_cast<DType>(info.dtype);
    has_dtype_ = (info.flags & NABLA_C_VAR_DTYPE_KNOWN) != 0;
    persistable_ = (info.flags & NABLA_C_VAR_PERSISTABLE) != 0;
    stop_gradient_ = (info.flags & NABLA_C_VAR_STOP_GRADIENT) != 0;
    declared_ = (info.flags & NABLA_C_VAR_DECLARED) != 0;
    shape_.assign(info.dims, info.dims + (info.dims ? info.rank : 0));
    const int32_t type = Api().pass_var_type(pass_, block_, name_.c_str());
    if (type < 0) ThrowApiError();
    type_ = static_cast<VarType>(type);
  }
  void Send() const {
    nabla_var_info info{};
    info.struct_size = sizeof info;
    info.dtype = static_cast<int32_t>(dtype_);
    info.flags = (has_dtype_ ? uint32_t{NABLA_C_VAR_DTYPE_KNOWN} : 0u) |
                 (persistable_ ? uint32_t{NABLA_C_VAR_PERSISTABLE} : 0u) |
                 (stop_gradient_ ? uint32_t{NABLA_C_VAR_STOP_GRADIENT} : 0u) |
                 (declared_ ? uint32_t{NABLA_C_VAR_DECLARED} : 0u);
    info.dims = shape_.empty() ? nullptr : shape_.data();
    info.rank = shape_.size();
    Check(Api().pass_var_set(pass_, block_, name_.c_str(), &info));
  }
  template <typename F, typename V>
  void Set(F& field, V&& value) {
    NABLA_ENFORCE(pass_, kUnimplemented, "var '", name_, "': a fusion pattern's block is read only");
    F old = std::move(field);
    field = std::forward<V>(value);
    try {
      Send();
    } catch (...) {
      field = std::move(old);
      throw;
    }
  }
  std::string name_;
  VarType type_ = VarType::kDense;
  DType dtype_ = DType::kFloat32;
  bool has_dtype_ = false;
  Shape shape_;
  bool persistable_ = false;
  bool stop_gradient_ = false;
  bool declared_ = false;
  nabla_pass_context* pass_ = nullptr;  // null: a fusion pattern's var
  size_t block_ = 0;
};

class BlockDesc {
 public:
  // A fusion pattern's view of the chain's block, read when asked.
  explicit BlockDesc(nabla_fusion_context* c) : c_(c) {}
  BlockDesc(const BlockDesc&) = delete;
  BlockDesc& operator=(const BlockDesc&) = delete;

  int Idx() const { return static_cast<int>(idx_); }
  int ParentIdx() const { return parent_idx_; }
  // Non-owning; null for the root block.
  BlockDesc* Parent() const;
  ProgramDesc* Program() const { return program_; }

  bool HasVar(const std::string& name) const { return FindVar(name) != nullptr; }
  // This block only (a program pass's).
  VarDesc* FindVar(const std::string& name) const {
    PassOnly("FindVar");
    for (const auto& v : vars_)
      if (v->Name() == name) return v.get();
    return nullptr;
  }
  // The var, looked up through the enclosing blocks; null when there is none.
  VarDesc* FindVarRecursive(const std::string& name) const {
    if (c_) return FusionVar(name);
    for (const BlockDesc* b = this; b; b = b->Parent())
      if (VarDesc* v = b->FindVar(name)) return v;
    return nullptr;
  }
  bool HasVarRecursive(const std::string& name) const { return FindVarRecursive(name) != nullptr; }
  // The var of this block, created (dense, float32 not yet known, no shape)
  // when absent.
  VarDesc* Var(const std::string& name) {
    if (VarDesc* v = FindVar(name)) return v;
    std::unique_ptr<VarDesc> v(new VarDesc(name, pass_, idx_));
    v->Send();
    vars_.push_back(std::move(v));
    return vars_.back().get();
  }
  void RemoveVar(const std::string& name) {
    PassOnly("RemoveVar");
    for (size_t i = 0; i < vars_.size(); ++i)
      if (vars_[i]->Name() == name) {
        Check(Api().pass_remove_var(pass_, idx_, name.c_str()));
        vars_.erase(vars_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
  }
  const std::vector<std::unique_ptr<VarDesc>>& AllVars() const {
    PassOnly("AllVars");
    return vars_;
  }

  // Ops, in execution order.
  size_t OpSize() const { return AllOps().size(); }
  OpDesc* Op(size_t i) const { return AllOps().at(i).get(); }
  const std::vector<std::unique_ptr<OpDesc>>& AllOps() const {
    if (c_ && !ops_loaded_) {
      ops_loaded_ = true;
      for (size_t i = 0, n = Api().fusion_block_op_count(c_); i < n; ++i)
        ops_.push_back(std::make_unique<OpDesc>(OpDesc::FromC(CheckPtr(Api().fusion_block_op(c_, i)))));
    }
    return ops_;
  }
  OpDesc* AppendOp(std::unique_ptr<OpDesc> op) { return InsertOp(ops_.size(), std::move(op)); }
  OpDesc* AppendOp(OpDesc op) { return AppendOp(std::make_unique<OpDesc>(std::move(op))); }
  OpDesc* InsertOp(size_t index, std::unique_ptr<OpDesc> op) {
    PassOnly("InsertOp");
    NABLA_ENFORCE(op, kInvalidArgument, "InsertOp: received no op");
    NABLA_ENFORCE(index <= ops_.size(), kOutOfRange, "InsertOp: index ", index, " in a block of ", ops_.size(), " ops");
    Check(Api().pass_insert_op(pass_, idx_, index, op->Type().c_str()));
    op->in_program_ = true;
    op->synced_.reset();
    ops_.insert(ops_.begin() + static_cast<std::ptrdiff_t>(index), std::move(op));
    Send(index, OpDesc(ops_[index]->Type(), {}, {}, {}));
    return ops_[index].get();
  }
  void RemoveOps(size_t begin, size_t end) {  // [begin, end)
    PassOnly("RemoveOps");
    Check(Api().pass_remove_ops(pass_, idx_, begin, end));
    ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(begin), ops_.begin() + static_cast<std::ptrdiff_t>(end));
  }

 private:
  friend class ::nabla::c_sdk::ProgramDesc;
  friend struct PassAccess;
  BlockDesc(ProgramDesc* program, nabla_pass_context* pass, size_t idx) : program_(program), pass_(pass), idx_(idx) {
    int64_t parent = -1;
    Check(Api().pass_block_parent(pass, idx, &parent));
    parent_idx_ = static_cast<int>(parent);
    for (size_t i = 0, n = Api().pass_op_count(pass, idx); i < n; ++i) {
      auto op = std::make_unique<OpDesc>(OpDesc::FromC(CheckPtr(Api().pass_op(pass, idx, i))));
      int32_t line = 0, col = 0;
      Check(Api().pass_op_pos(pass, idx, i, &line, &col));
      op->pos_ = SourcePos{line, col};
      op->in_program_ = true;
      ops_.push_back(std::move(op));
    }
    for (size_t i = 0, n = Api().pass_var_count(pass, idx); i < n; ++i) {
      std::unique_ptr<VarDesc> v(new VarDesc(CheckPtr(Api().pass_var_name(pass, idx, i)), pass, idx));
      v->Load();
      vars_.push_back(std::move(v));
    }
  }
  void PassOnly(const char* what) const {
    NABLA_ENFORCE(pass_, kUnimplemented, what, ": a fusion pattern's block is read only");
  }
  VarDesc* FusionVar(const std::string& name) const {
    auto it = fusion_vars_.find(name);
    if (it != fusion_vars_.end()) return it->second.get();
    std::unique_ptr<VarDesc>& v = fusion_vars_[name];
    const int64_t rank = Api().fusion_var_rank(c_, name.c_str());
    if (rank >= 0) {
      Shape shape(static_cast<size_t>(rank));
      Check(Api().fusion_var_dims(c_, name.c_str(), shape.data()));
      v = std::make_unique<VarDesc>(name, Api().fusion_var_dtype(c_, name.c_str()), std::move(shape));
    }
    return v.get();
  }
  size_t IndexOf(const OpDesc* op) const {
    for (size_t i = 0; i < ops_.size(); ++i)
      if (ops_[i].get() == op) return i;
    return ops_.size();
  }
  // Sends op i's difference from `was` (what the core holds) to the core.
  void Send(size_t i, const OpDesc& was) {
    const nabla_api& api = Api();
    const OpDesc& now = *ops_[i];
    for (int32_t output = 0; output < 2; ++output) {
      const VarNameMap& before = output ? was.outputs_ : was.inputs_;
      const VarNameMap& after = output ? now.outputs_ : now.inputs_;
      for (const auto& [slot, args] : before)
        if (!after.count(slot)) Check(api.pass_op_remove_slot(pass_, idx_, i, output, slot.c_str()));
      for (const auto& [slot, args] : after) {
        auto it = before.find(slot);
        if (it != before.end() && it->second == args) continue;
        std::vector<const char*> names;
        for (const std::string& a : args) names.push_back(a.c_str());
        Check(api.pass_op_set_args(pass_, idx_, i, output, slot.c_str(), names.data(), names.size()));
      }
    }
    for (const auto& [name, value] : was.attrs_)
      if (!now.attrs_.count(name)) Check(api.pass_op_remove_attr(pass_, idx_, i, name.c_str()));
    for (const auto& [name, value] : now.attrs_) {
      auto it = was.attrs_.find(name);
      if (it != was.attrs_.end() && it->second == value) continue;
      CAttr c(value);
      Check(api.pass_op_set_attr(pass_, idx_, i, name.c_str(), &c.value));
    }
    if (now.pos_.line != was.pos_.line || now.pos_.col != was.pos_.col)
      Check(api.pass_op_set_pos(pass_, idx_, i, now.pos_.line, now.pos_.col));
  }
  // Sends what changed in op i since the core last had it.
  void Flush(size_t i) {
    OpDesc& op = *ops_[i];
    if (!op.synced_) return;
    const std::unique_ptr<OpDesc> was = std::move(op.synced_);
    if (was->type_ != op.type_) {  // a new type: a new op in its place
      Check(Api().pass_remove_ops(pass_, idx_, i, i + 1));
      Check(Api().pass_insert_op(pass_, idx_, i, op.type_.c_str()));
      Send(i, OpDesc(op.type_, {}, {}, {}));
    } else {
      Send(i, *was);
    }
  }

  nabla_fusion_context* c_ = nullptr;  // a fusion pattern's block
  mutable std::map<std::string, std::unique_ptr<VarDesc>> fusion_vars_;
  mutable bool ops_loaded_ = false;
  ProgramDesc* program_ = nullptr;  // a program pass's block
  nabla_pass_context* pass_ = nullptr;
  size_t idx_ = 0;
  int parent_idx_ = -1;
  mutable std::vector<std::unique_ptr<OpDesc>> ops_;
  std::vector<std::unique_ptr<VarDesc>> vars_;
};

}  // namespace sdk_detail

using sdk_detail::BlockDesc;
using sdk_detail::VarDesc;

// The program a program pass edits: its blocks, read when the pass starts.
// Since C ABI version 6 also the read-only view a control-flow kernel
// (ExecutionContext::Run) and grad maker (GradOpDescMakerBase::GradBlock)
// have of their program, whose blocks are read when first asked for.
class ProgramDesc {
 public:
  ProgramDesc(const ProgramDesc&) = delete;
  ProgramDesc& operator=(const ProgramDesc&) = delete;
  size_t Size() const { return blocks_.size(); }
  BlockDesc* Block(size_t i) const {
    std::unique_ptr<BlockDesc>& b = blocks_.at(i);
    if (!b) b.reset(new BlockDesc(const_cast<ProgramDesc*>(this), c_, i));
    return b.get();
  }
  BlockDesc* Root() const { return Block(0); }
  // "file:line:col" for a position in the program's source, "" for none
  // (C ABI version 6).
  std::string Where(const SourcePos& pos) const {
    return sdk_detail::CheckPtr(Api().pass_where(c_, pos.line, pos.col));
  }

 private:
  friend struct sdk_detail::PassAccess;
  friend class ExecutionContext;
  friend class GradOpDescMakerBase;
  explicit ProgramDesc(nabla_pass_context* c, bool lazy = false) : c_(c) {
    blocks_.resize(Api().pass_block_count(c));
    NABLA_ENFORCE(!blocks_.empty(), kInvalidArgument, "received a program without blocks");
    if (!lazy)
      for (size_t b = 0; b < blocks_.size(); ++b) Block(b);
  }
  // Every op's changes, to the core.
  void Flush() {
    for (const auto& b : blocks_)
      if (b)
        for (size_t i = 0; i < b->ops_.size(); ++i) b->Flush(i);
  }
  // The pass running on this thread's program (FillDefaultAttrs builds ops there).
  static ProgramDesc*& Current() {
    static thread_local ProgramDesc* current = nullptr;
    return current;
  }
  nabla_pass_context* c_;
  mutable std::vector<std::unique_ptr<BlockDesc>> blocks_;
};

struct ExecutionContext::RunState {
  explicit RunState(nabla_pass_context* p) : program(p, /*lazy=*/true) {}
  ProgramDesc program;
  ExecutorOptions options;
  RunContext run;
};

inline const RunContext* ExecutionContext::Run() const {
  if (!run_) {
    nabla_pass_context* p = Api().kernel_program(c_);
    if (p == nullptr) return nullptr;
    auto state = std::make_shared<RunState>(p);
    int64_t v = 0;
    sdk_detail::Check(Api().kernel_run_option(c_, "threads", &v));
    state->options.threads = static_cast<int>(v);
    sdk_detail::Check(Api().kernel_run_option(c_, "seed", &v));
    state->options.seed = static_cast<uint64_t>(v);
    sdk_detail::Check(Api().kernel_run_option(c_, "max_loop_iterations", &v));
    state->options.max_loop_iterations = v;
    state->run.program = &state->program;
    state->run.options = &state->options;
    run_ = std::move(state);
  }
  return &run_->run;
}

inline const BlockDesc* GradOpDescMakerBase::GradBlock(size_t i) const {
  const int64_t idx = Api().grad_block(g_, i);
  if (idx < 0) sdk_detail::ThrowApiError();
  if (!program_)
    program_ = std::shared_ptr<ProgramDesc>(new ProgramDesc(sdk_detail::CheckPtr(Api().grad_program(g_)), true));
  return program_->Block(static_cast<size_t>(idx));
}

inline BlockDesc* BlockDesc::Parent() const {
  return program_ && parent_idx_ >= 0 ? program_->Block(static_cast<size_t>(parent_idx_)) : nullptr;
}

// What the core's registry says about an op type (its traits), for passes
// that must know whether an op owns a block or draws random numbers.
struct OpTraits {
  bool has_sub_block = false;
  bool control_flow = false;
  bool random = false;
  bool array_io = false;
  bool collective = false;
  bool updates_in_place = false;
  bool dtype_cast = false;
  OpPrecision precision = OpPrecision::kFollowInputs;
};
struct OpInfo {
  std::string type;
  OpTraits traits;
};
// The core's registry as it is now, asked through the C ABI.
class OpRegistry {
 public:
  // Null for a type no loaded plugin registers.
  const OpInfo* Find(const std::string& type) const {
    auto it = found_.find(type);
    if (it != found_.end()) return it->second.get();
    uint32_t traits = 0;
    int32_t precision = 0;
    const int32_t known = Api().op_type_traits(type.c_str(), &traits, &precision);
    if (known < 0) sdk_detail::ThrowApiError();
    std::unique_ptr<OpInfo>& info = found_[type];
    if (known) {
      info = std::make_unique<OpInfo>();
      info->type = type;
      OpTraits& t = info->traits;
      t.random = traits & NABLA_C_TRAIT_RANDOM;
      t.updates_in_place = traits & NABLA_C_TRAIT_UPDATES_IN_PLACE;
      t.array_io = traits & NABLA_C_TRAIT_ARRAY_IO;
      t.collective = traits & NABLA_C_TRAIT_COLLECTIVE;
      t.dtype_cast = traits & NABLA_C_TRAIT_DTYPE_CAST;
      t.has_sub_block = traits & NABLA_C_TRAIT_HAS_SUB_BLOCK;
      t.control_flow = traits & NABLA_C_TRAIT_CONTROL_FLOW;
      t.precision = static_cast<OpPrecision>(precision);
    }
    return info.get();
  }
  const OpInfo& Get(const std::string& type) const {
    const OpInfo* info = Find(type);
    NABLA_ENFORCE(info, kNotFound, "op '", type, "' is not registered");
    return *info;
  }

 private:
  mutable std::map<std::string, std::unique_ptr<OpInfo>> found_;
};
inline std::shared_ptr<const OpRegistry> CurrentRegistry() { return std::make_shared<const OpRegistry>(); }

// A rewrite of a whole program an op brings (OpBuilder::RewritesAfterBackward
// and RewritesBeforeBackward), as in nabla's tree: `run` edits `program` in
// place and returns how many places it changed; it must leave every var in
// `keep`, every persistable var and every result read later as it was.
struct ProgramPass {
  std::string name;
  std::function<size_t(ProgramDesc& program, const std::unordered_set<std::string>& keep)> run;
};

namespace sdk_detail {
struct PassAccess {
  // A pass over the core's program: read it, run, send the ops' changes.
  static int32_t Run(const nabla_api*, void* user, nabla_pass_context* c, size_t* changed) {
    return Guard([&] {
      std::unordered_set<std::string> keep;
      for (size_t i = 0, n = Api().pass_keep_count(c); i < n; ++i) keep.insert(CheckPtr(Api().pass_keep(c, i)));
      ProgramDesc program(c);
      struct Current {
        explicit Current(ProgramDesc* p) { ProgramDesc::Current() = p; }
        ~Current() { ProgramDesc::Current() = nullptr; }
      } current(&program);
      *changed = static_cast<const ProgramPass*>(user)->run(program, keep);
      program.Flush();
    });
  }
  // Var-type inference (OpBuilder::InferVarType): the op's program read
  // through the pass context the core made for it; the function sets vars.
  static int32_t InferVarType(const nabla_api*, void* user, const nabla_op* op, nabla_pass_context* c, size_t block) {
    return Guard([&] {
      ProgramDesc program(c);
      NABLA_ENFORCE(block < program.Size(), kOutOfRange, "var-type inference: block ", block, " of a program of ",
                    program.Size());
      const OpDesc desc = OpDesc::FromC(op);
      (*static_cast<const std::function<void(const OpDesc&, BlockDesc&)>*>(user))(desc, *program.Block(block));
    });
  }
  static void FillDefaults(OpDesc& op) {
    ProgramDesc* program = ProgramDesc::Current();
    NABLA_ENFORCE(program, kUnimplemented,
                  "FillDefaultAttrs: over the C ABI, attribute defaults are filled inside a program pass only");
    BlockDesc* block = program->Root();
    size_t at = block->ops_.size();
    if (op.in_program_) {
      for (const auto& b : program->blocks_)
        if (b && (at = b->IndexOf(&op)) < b->ops_.size()) {
          block = b.get();
          break;
        }
      NABLA_ENFORCE(at < block->ops_.size(), kNotFound, "FillDefaultAttrs: op '", op.Type(),
                    "' belongs to no block of the pass's program");
      block->Flush(at);
      Fill(*block, at, op);
      return;
    }
    // An op not in the program: built at the root block's end for a moment.
    block->InsertOp(at, std::make_unique<OpDesc>(op));
    try {
      Fill(*block, at, op);
    } catch (...) {
      block->RemoveOps(at, at + 1);
      throw;
    }
    block->RemoveOps(at, at + 1);
  }
  static const Tensor& Evaluate(const BlockDesc& block, const std::vector<size_t>& ops, const std::string& var) {
    NABLA_ENFORCE(block.pass_, kUnimplemented, "EvaluateOnHost: over the C ABI, inside a program pass only");
    block.program_->Flush();  // the core runs the ops as the pass has them now
    return *reinterpret_cast<const Tensor*>(
        CheckPtr(Api().pass_evaluate_on_host(block.pass_, block.idx_, ops.data(), ops.size(), var.c_str())));
  }
  static void Fill(BlockDesc& block, size_t at, OpDesc& op) {
    Check(Api().pass_op_fill_default_attrs(block.pass_, block.idx_, at));
    // What the core holds now: nothing left to send.
    op.attrs_ = OpDesc::FromC(CheckPtr(Api().pass_op(block.pass_, block.idx_, at))).attrs_;
    if (block.ops_[at].get() != &op) block.ops_[at]->attrs_ = op.attrs_;
  }
};
}  // namespace sdk_detail

// Adds the attributes op's schema has defaults for where op has none, as the
// core's does (an unknown type or a required attribute left out is an
// error). Over the C ABI inside a program pass only.
inline void FillDefaultAttrs(OpDesc& op, const OpRegistry&, const ProgramDesc* = nullptr) {
  sdk_detail::PassAccess::FillDefaults(op);
}
// Runs ops `ops` of `block` (indices, ascending) once on the host and
// returns `var`'s value there, as the core's (nabla/fusion.h): refused when
// an op is not constant (reads a var no earlier op of the list writes, draws
// random numbers, runs blocks); an op failing is thrown. Over the C ABI inside
// a program pass only (the pass's pending edits reach the core first); the
// value is the core's, valid until the next call or the pass's end: bind it
// with `const auto&`, which in nabla's tree holds the returned copy.
inline const Tensor& EvaluateOnHost(const BlockDesc& block, const std::vector<size_t>& ops, const std::string& var) {
  return sdk_detail::PassAccess::Evaluate(block, ops, var);
}
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

// Callbacks live as long as the process: plugins are never unloaded. Each
// is also listed where a global reaches it, so leak checkers see it held,
// not lost (LeakSanitizer would otherwise report, and symbolize, every
// callback of every C ABI plugin a process loads, at each exit).
inline std::vector<void*>& HeldCallbacks() {
  static auto* held = new std::vector<void*>();
  return *held;
}
template <typename F>
void* Keep(F f) {
  F* kept = new F(std::move(f));
  HeldCallbacks().push_back(kept);
  return kept;
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
  // Marks input `slot` (declared before, e.g. by DefaultGradOp) no-buffer:
  // the kernel reads its shape and dtype only (kNoBuffer; C ABI version 4).
  OpBuilder& NoBufferInput(const std::string& slot) {
    sdk_detail::Check(Api().op_input_no_buffer(b_, slot.c_str()));
    return *this;
  }
  // Marks input slots (declared before, e.g. by DefaultGradOp) as ones the
  // op's bfloat16 kernel also takes in float32, which that kernel must read
  // in either dtype (nabla/mixed_precision.h; C ABI version 8).
  OpBuilder& Bf16TakesFloat32(const std::vector<std::string>& slots) {
    for (const std::string& slot : slots) sdk_detail::Check(Api().op_bf16_takes_float32(b_, slot.c_str()));
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
  // Sets the var types (and dtypes) of the op's outputs in its block before
  // shapes are inferred (C ABI version 5): a tensor array's writer.
  OpBuilder& InferVarType(std::function<void(const OpDesc& op, BlockDesc& block)> fn) {
    sdk_detail::Check(
        Api().op_infer_var_type(b_, sdk_detail::PassAccess::InferVarType, sdk_detail::Keep(std::move(fn))));
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
  // A rewrite of programs that already hold their backward part and
  // optimizer (FuseGradOps), and one of programs without it (FuseOps, after
  // the chains): see ProgramPass.
  OpBuilder& RewritesAfterBackward(ProgramPass pass) { return Rewrites(1, std::move(pass)); }
  OpBuilder& RewritesBeforeBackward(ProgramPass pass) { return Rewrites(0, std::move(pass)); }
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
  // Its outputs are elements of its input, unchanged (C ABI version 8).
  OpBuilder& MovesData() { return Traits(NABLA_C_TRAIT_MOVES_DATA); }
  // The kernel runs blocks itself (ExecutionContext::RunBlock; C ABI version 6).
  OpBuilder& ControlFlow() { return Traits(NABLA_C_TRAIT_CONTROL_FLOW); }
  OpBuilder& Precision(OpPrecision p) {
    precision_ = p;
    return Traits(0);
  }

 private:
  OpBuilder& Rewrites(int32_t after_backward, ProgramPass pass) {
    const nabla_pass_fn fn = pass.run ? sdk_detail::PassAccess::Run : nullptr;
    const auto* kept = static_cast<const ProgramPass*>(sdk_detail::Keep(std::move(pass)));
    sdk_detail::Check(Api().op_rewrites(b_, after_backward, kept->name.c_str(), fn, const_cast<ProgramPass*>(kept)));
    return *this;
  }
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
