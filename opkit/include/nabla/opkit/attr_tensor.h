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
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
#define NABLA_ENFORCE_VALUE(cond, attr_value, ...)                                               \
  do {                                                                                           \
    if (!(cond)) ::nabla::ThrowError((attr_value).BadValueKind(), ::nabla::StrCat(__VA_ARGS__)); \
  } while (0)

// Which of a 1-D tensor input and a list of one-element inputs wins where
// both are given: Paddle prefers the 1-D tensor (slice, fill_constant,
// expand, uniform_random) except in reshape (ShapeTensor, the list).
enum class ListOrder { kTensorFirst, kListFirst };

// A list of ints from input `tensor_slot` (one 1-D int32/int64 tensor), else
// input `list_slot` (int32/int64 tensors of one element each), else
// attribute `attr` (ints). An empty slot name: the op has no such input.
AttrValue<std::vector<int64_t>> IntListAttrOrTensor(const InferShapeContext& c, const std::string& tensor_slot,
                                                    const std::string& list_slot, const std::string& attr,
                                                    ListOrder order = ListOrder::kTensorFirst);
AttrValue<std::vector<int64_t>> IntListAttrOrTensor(const ExecutionContext& c, const std::string& tensor_slot,
                                                    const std::string& list_slot, const std::string& attr,
                                                    ListOrder order = ListOrder::kTensorFirst);

// One int from input `slot` (an int32/int64 tensor of one element), else
// attribute `attr` (int).
AttrValue<int64_t> IntAttrOrTensor(const InferShapeContext& c, const std::string& slot, const std::string& attr);
AttrValue<int64_t> IntAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr);

// One float from input `slot` (a float32/float64 tensor of one element),
// else attribute `attr` (float).
AttrValue<double> FloatAttrOrTensor(const InferShapeContext& c, const std::string& slot, const std::string& attr);
AttrValue<double> FloatAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr);

// An axis of a tensor of rank `rank` from input `slot` (one int32/int64
// element), else attribute `attr`: checked (kOutOfRange naming the source
// and value) and made non-negative. nullopt: build time, from an input.
std::optional<int> AxisAttrOrTensor(const InferShapeContext& c, const std::string& slot, const std::string& attr,
                                    size_t rank);
int AxisAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr, size_t rank);

// The shape of a tensor an op creates (fill_constant, uniform_random):
// input ShapeTensor (1-D), else ShapeTensorList, else attribute shape, each
// dim >= 0 (an error naming the source and value otherwise). Build time with
// the shape from an input: its dims are -1 (its rank, where known).
Shape CreatedShape(const InferShapeContext& c);
Shape CreatedShape(const ExecutionContext& c);

// "[2, -3]": a value in messages.
std::string ValuesToString(const std::vector<int64_t>& values);

}  // namespace nabla::opkit
