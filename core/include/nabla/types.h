#pragma once
// Element types, variable kinds and devices: the small closed vocabularies the
// core may know. Ops are not among them: an op is a string key.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nabla/bf16_bits.h"
#include "nabla/export.h"

namespace nabla {

// kBFloat16 is bfloat16 (the top half of a float32: same exponent range, 8
// bits of mantissa). Mixed-precision programs (nabla/mixed_precision.h) hold
// it between casts; files (npy, checkpoints) never do.
enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBool, kBFloat16 };

NABLA_API const char* DTypeName(DType dtype);  // "float32", ...
NABLA_API size_t DTypeSize(DType dtype);
// Parses "float32" etc.; returns false for an unknown name.
NABLA_API bool ParseDType(const std::string& name, DType* out);
inline bool IsFloating(DType d) { return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kBFloat16; }

// The storage of one bfloat16 element. Kernels convert to float32 to compute
// (cpu::ConvertToBf16 / ConvertFromBf16 round to nearest even).
struct bfloat16 {
  uint16_t bits;
};
inline float Bf16ToFloat(bfloat16 b) { return bf16_bits::ToFloat(b.bits); }
// Round to nearest, ties to even (what oneDNN and PyTorch do); NaN stays NaN.
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

// What a variable holds at run time.
enum class VarType { kDense, kTensorArray, kStepScopes };
NABLA_API const char* VarTypeName(VarType type);  // "dense", ...
NABLA_API bool ParseVarType(const std::string& name, VarType* out);

enum class DeviceType { kCPU, kOpenCL };
NABLA_API const char* DeviceTypeName(DeviceType type);  // "cpu", "opencl"
NABLA_API bool ParseDeviceType(const std::string& name, DeviceType* out);

using Shape = std::vector<int64_t>;
// Product of the dims; -1 (unknown) dims make it -1.
NABLA_API int64_t NumElements(const Shape& shape);
NABLA_API std::string ShapeToString(const Shape& shape);  // "[2, 3]"

// Reserved names from the seed documents (docs/program-format.md, "Names").
inline constexpr const char* kGradSuffix = "@GRAD";
inline constexpr const char* kRenameInfix = "@RENAME@";
inline constexpr const char* kEmptyVarName = "@EMPTY@";
inline std::string GradVarName(const std::string& var) { return var + kGradSuffix; }
// The forward var of a gradient (the one rule, docs/architecture.md): x@GRAD@RENAME@2 -> x, x@GRAD@GRAD -> x@GRAD.
NABLA_API std::string StripGradSuffix(const std::string& grad_name);
NABLA_API bool IsGradVarName(const std::string& name);

}  // namespace nabla
