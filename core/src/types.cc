#include "nabla/types.h"

#include <cstring>

#include "nabla/error.h"

namespace nabla {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

bool ParseDType(const std::string& name, DType* out) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool, DType::kBFloat16}) {
    if (name == DTypeName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

const char* VarTypeName(VarType type) {
  switch (type) {
    case VarType::kDense:
      return "dense";
    case VarType::kTensorArray:
      return "tensor_array";
    case VarType::kStepScopes:
      return "step_scopes";
  }
  return "?";
}

bool ParseVarType(const std::string& name, VarType* out) {
  for (VarType t : {VarType::kDense, VarType::kTensorArray, VarType::kStepScopes}) {
    if (name == VarTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

// DeviceTypeName and ParseDeviceType live in device_registry.cc, with the
// table of registered device types.

int64_t NumElements(const Shape& shape) {
  // One pass (every kernel asks, often several times): an unknown dim wins
  // over a 0, a 0 over an overflow. A shape from a file may be absurd
  // (2^62 x 2^62): an error, not a count that wraps to something small.
  int64_t n = 1;
  bool unknown = false, zero = false, overflow = false;
  for (int64_t d : shape) {
    if (d < 0) {
      unknown = true;
    } else if (d == 0) {
      zero = true;
    } else if (!overflow) {
      overflow = __builtin_mul_overflow(n, d, &n);
    }
  }
  if (unknown) return -1;
  if (zero) return 0;
  NABLA_ENFORCE(!overflow, kOutOfRange, "shape ", ShapeToString(shape), " has more elements than a 64-bit count holds");
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool IsGradVarName(const std::string& name) {
  size_t n = std::strlen(kGradSuffix);
  return name.size() > n && name.compare(name.size() - n, n, kGradSuffix) == 0;
}

std::string StripGradSuffix(const std::string& grad_name) {
  std::string base = grad_name;
  const size_t rename = base.rfind(kRenameInfix);
  if (rename != std::string::npos) base.resize(rename);
  if (IsGradVarName(base)) base.resize(base.size() - std::strlen(kGradSuffix));
  return base;
}

}  // namespace nabla
