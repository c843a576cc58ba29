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
//
// Header-only, so that plugins on the C ABI compile the same code against
// the SDK's contexts (nabla/sdk/shim maps the core headers included here).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"

namespace nabla::opkit {

inline constexpr unsigned kTensorAttrInput = kDispensable | kNoGrad;
inline constexpr unsigned kTensorAttrListInput = kDispensable | kDuplicable | kNoGrad;

// An attribute's value and where it came from.
template <typename T>
struct AttrValue {
  std::optional<T> value;  // nullopt: given by an input, unknown before run time
  std::string source;      // "input Shape" or "attribute shape", for messages
  int64_t size = -1;       // lists: how many entries, where known (at build time too)

  bool Known() const { return value.has_value(); }
  bool FromInput() const { return source.rfind("input ", 0) == 0; }
  // The kind of an error about this value. A value a tensor held at run time
  // is the computation's failure (kRuntime: `nabla exec` exits 1); an
  // attribute's value is the program's fault (`for_attribute`, a bad-input
  // kind: exit 2).
  ErrorKind BadValueKind(ErrorKind for_attribute = ErrorKind::kInvalidArgument) const {
    return FromInput() ? ErrorKind::kRuntime : for_attribute;
  }
  const T& operator*() const { return *value; }
  const T* operator->() const { return &*value; }
};

// NABLA_ENFORCE for a check of an AttrValue's value: the error's kind
// follows where the value came from (AttrValue::BadValueKind).
#ifndef NABLA_ENFORCE_VALUE
#define NABLA_ENFORCE_VALUE(cond, attr_value, ...)                                               \
  do {                                                                                           \
    if (!(cond)) ::nabla::ThrowError((attr_value).BadValueKind(), ::nabla::StrCat(__VA_ARGS__)); \
  } while (0)
#endif

// Which of a 1-D tensor input and a list of one-element inputs wins where
// both are given: Paddle prefers the 1-D tensor (slice, fill_constant,
// expand, uniform_random) except in reshape (ShapeTensor, the list).
enum class ListOrder { kTensorFirst, kListFirst };

// "[2, -3]": a value in messages.
inline std::string ValuesToString(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += StrCat(i ? ", " : "", values[i]);
  return s + "]";
}

// ---------------------------------------------------------------- how

namespace attr_tensor_detail {
// The two contexts as the helpers read them.
inline bool Runtime(const InferShapeContext& c) { return c.IsRuntime(); }
inline bool Runtime(const ExecutionContext&) { return true; }
inline std::string WhereOf(const InferShapeContext& c) { return c.Where(); }
inline std::string WhereOf(const ExecutionContext& c) { return StrCat("op '", c.Op().Type(), "'"); }
inline Shape ShapeOf(const InferShapeContext& c, const std::string& slot) { return c.InputShape(slot); }
inline Shape ShapeOf(const ExecutionContext& c, const std::string& slot) { return c.Input(slot).GetShape(); }

template <typename Ctx>
std::string Arg(const Ctx& c, const std::string& slot, size_t i, bool list) {
  const auto& args = c.Op().Input(slot);
  return StrCat("input ", slot, list ? StrCat("[", i, "]") : std::string(), " (var '", i < args.size() ? args[i] : "",
                "')");
}

template <typename HostTensor>
std::vector<int64_t> Ints(const HostTensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.Numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = t.GetDType() == DType::kInt32 ? t.template Data<int32_t>()[i] : t.template Data<int64_t>()[i];
  return v;
}

// "attribute scale": built in place (kernels ask on every call, and
// operator+ on a literal measures and reallocates more than it needs to).
template <size_t N>
void SetSource(std::string& source, const char (&what)[N], const std::string& name) {
  source.reserve(N - 1 + name.size());
  source.append(what, N - 1).append(name);
}

inline bool IsInt(DType d) { return d == DType::kInt32 || d == DType::kInt64; }

// The int32/int64 tensor of input slot[i]; `one` asks for exactly one
// element, else rank 1.
template <typename Ctx>
std::vector<int64_t> ReadInts(const Ctx& c, const std::string& slot, size_t i, bool one, bool list) {
  const auto t = c.InputHostTensor(slot, i);
  const bool ok = IsInt(t.GetDType()) && (one ? t.Numel() == 1 : t.Rank() == 1);
  // Read at run time only: a wrong tensor is the computation's failure.
  NABLA_ENFORCE(ok, kRuntime, WhereOf(c), ": ", Arg(c, slot, i, list), " must be an int32 or int64 tensor ",
                one ? "of one element" : "of rank 1", ", but received ", t.DebugString());
  return Ints(t);
}

template <typename Ctx>
AttrValue<std::vector<int64_t>> IntListImpl(const Ctx& c, const std::string& tensor_slot, const std::string& list_slot,
                                            const std::string& attr, ListOrder order) {
  const bool has_tensor = !tensor_slot.empty() && c.HasInput(tensor_slot);
  const bool has_list = !list_slot.empty() && c.HasInput(list_slot);
  AttrValue<std::vector<int64_t>> r;
  if (has_tensor && (!has_list || order == ListOrder::kTensorFirst)) {
    SetSource(r.source, "input ", tensor_slot);
    if (Runtime(c)) {
      r.value = ReadInts(c, tensor_slot, 0, false, false);
    } else {
      const Shape s = ShapeOf(c, tensor_slot);
      if (s.size() == 1 && s[0] >= 0) r.size = s[0];
    }
  } else if (has_list) {
    SetSource(r.source, "input ", list_slot);
    const size_t n = c.InputSize(list_slot);
    if (Runtime(c)) {
      std::vector<int64_t> v;
      for (size_t i = 0; i < n; ++i) v.push_back(ReadInts(c, list_slot, i, true, true)[0]);
      r.value = std::move(v);
    }
    r.size = static_cast<int64_t>(n);
  } else {
    SetSource(r.source, "attribute ", attr);
    const auto& a = c.template Attr<std::vector<int>>(attr);
    r.value = std::vector<int64_t>(a.begin(), a.end());
  }
  if (r.value) r.size = static_cast<int64_t>(r.value->size());
  return r;
}

template <typename Ctx>
AttrValue<int64_t> IntImpl(const Ctx& c, const std::string& slot, const std::string& attr) {
  AttrValue<int64_t> r;
  if (c.HasInput(slot)) {
    SetSource(r.source, "input ", slot);
    if (Runtime(c)) r.value = ReadInts(c, slot, 0, true, false)[0];
  } else {
    SetSource(r.source, "attribute ", attr);
    r.value = c.template Attr<int>(attr);
  }
  return r;
}

template <typename Ctx>
AttrValue<double> FloatImpl(const Ctx& c, const std::string& slot, const std::string& attr) {
  AttrValue<double> r;
  if (c.HasInput(slot)) {
    SetSource(r.source, "input ", slot);
    if (Runtime(c)) {
      const auto t = c.InputHostTensor(slot, 0);
      const DType d = t.GetDType();
      NABLA_ENFORCE((d == DType::kFloat32 || d == DType::kFloat64) && t.Numel() == 1, kRuntime, WhereOf(c), ": ",
                    Arg(c, slot, 0, false), " must be a float32 or float64 tensor of one element, but received ",
                    t.DebugString());
      r.value = d == DType::kFloat32 ? static_cast<double>(t.template Data<float>()[0]) : t.template Data<double>()[0];
    }
  } else {
    SetSource(r.source, "attribute ", attr);
    r.value = c.template Attr<float>(attr);
  }
  return r;
}

template <typename Ctx>
Shape CreatedShapeImpl(const Ctx& c) {
  const auto shape = IntListImpl(c, "ShapeTensor", "ShapeTensorList", "shape", ListOrder::kTensorFirst);
  if (!shape.Known()) return Shape(std::max<int64_t>(shape.size, 0), -1);
  for (int64_t d : *shape)
    NABLA_ENFORCE_VALUE(d >= 0, shape, WhereOf(c), ": ", shape.source, " = ", ValuesToString(*shape), " holds ", d,
                        ": every dim of Out's shape must be >= 0");
  return Shape(shape->begin(), shape->end());
}

template <typename Ctx>
std::optional<int> AxisImpl(const Ctx& c, const std::string& slot, const std::string& attr, size_t rank) {
  const auto axis = IntImpl(c, slot, attr);
  if (!axis.Known()) return std::nullopt;
  const int64_t r = static_cast<int64_t>(rank);
  if (!(*axis >= -r && *axis < r))
    ThrowError(axis.BadValueKind(ErrorKind::kOutOfRange),
               StrCat(WhereOf(c), ": ", axis.source, " must be in [", -r, ", ", r, ") for an input of rank ", r,
                      ", but received ", *axis));
  return static_cast<int>(*axis < 0 ? *axis + r : *axis);
}
}  // namespace attr_tensor_detail

// ---------------------------------------------------------------- the helpers

// An axis of a tensor of rank `rank` from input `slot` (one int32/int64
// element), else attribute `attr`: checked (kOutOfRange naming the source
// and value) and made non-negative. nullopt: build time, from an input.
inline std::optional<int> AxisAttrOrTensor(const InferShapeContext& c, const std::string& slot, const std::string& attr,
                                           size_t rank) {
  return attr_tensor_detail::AxisImpl(c, slot, attr, rank);
}
inline int AxisAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr, size_t rank) {
  return *attr_tensor_detail::AxisImpl(c, slot, attr, rank);
}

// The shape of a tensor an op creates (fill_constant, uniform_random):
// input ShapeTensor (1-D), else ShapeTensorList, else attribute shape, each
// dim >= 0 (an error naming the source and value otherwise). Build time with
// the shape from an input: its dims are -1 (its rank, where known).
inline Shape CreatedShape(const InferShapeContext& c) { return attr_tensor_detail::CreatedShapeImpl(c); }
inline Shape CreatedShape(const ExecutionContext& c) { return attr_tensor_detail::CreatedShapeImpl(c); }

// A list of ints from input `tensor_slot` (one 1-D int32/int64 tensor), else
// input `list_slot` (int32/int64 tensors of one element each), else
// attribute `attr` (ints). An empty slot name: the op has no such input.
inline AttrValue<std::vector<int64_t>> IntListAttrOrTensor(const InferShapeContext& c, const std::string& tensor_slot,
                                                           const std::string& list_slot, const std::string& attr,
                                                           ListOrder order = ListOrder::kTensorFirst) {
  return attr_tensor_detail::IntListImpl(c, tensor_slot, list_slot, attr, order);
}
inline AttrValue<std::vector<int64_t>> IntListAttrOrTensor(const ExecutionContext& c, const std::string& tensor_slot,
                                                           const std::string& list_slot, const std::string& attr,
                                                           ListOrder order = ListOrder::kTensorFirst) {
  return attr_tensor_detail::IntListImpl(c, tensor_slot, list_slot, attr, order);
}
// One int from input `slot` (an int32/int64 tensor of one element), else
// attribute `attr` (int).
inline AttrValue<int64_t> IntAttrOrTensor(const InferShapeContext& c, const std::string& slot,
                                          const std::string& attr) {
  return attr_tensor_detail::IntImpl(c, slot, attr);
}
inline AttrValue<int64_t> IntAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr) {
  return attr_tensor_detail::IntImpl(c, slot, attr);
}
// One float from input `slot` (a float32/float64 tensor of one element),
// else attribute `attr` (float).
inline AttrValue<double> FloatAttrOrTensor(const InferShapeContext& c, const std::string& slot,
                                           const std::string& attr) {
  return attr_tensor_detail::FloatImpl(c, slot, attr);
}
inline AttrValue<double> FloatAttrOrTensor(const ExecutionContext& c, const std::string& slot,
                                           const std::string& attr) {
  return attr_tensor_detail::FloatImpl(c, slot, attr);
}

}  // namespace nabla::opkit
