#pragma once
// fill_constant's value, read once for its CPU and OpenCL kernels: the
// ValueTensor input (float32, float64, int32, int64 or bool), else attribute
// str_value, else attribute value.
// value is a float attribute (Paddle's), so an int64 such as 123456789 or a
// float64 such as 0.1 does not survive it; str_value carries such values
// exactly, as Paddle's Python layer writes it.
#include <string>

#include "nabla/opkit/number_text.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {

// str_value's check at registration: empty, or a number ParseNumberText reads.
inline void CheckStrValue(const std::string& s) {
  opkit::NumberText v;
  NABLA_ENFORCE(s.empty() || opkit::ParseNumberText(s, &v), kInvalidArgument,
                "attribute str_value must be empty or a number (an integer in int64's range, a decimal or "
                "exponent form within float64's, inf, -inf or nan), but received '",
                s, "'");
}

inline opkit::NumberText FillConstantValue(const ExecutionContext& ctx) {
  opkit::NumberText v;
  if (ctx.HasInput("ValueTensor")) {
    // Paddle reads it in Out's dtype; any of these, an integer exactly.
    const auto t = ctx.InputHostTensor("ValueTensor", 0);  // a Tensor, or (C ABI) the SDK's HostTensor
    const DType d = t.GetDType();
    const bool known =
        d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kInt32 || d == DType::kInt64 || d == DType::kBool;
    NABLA_ENFORCE(known && t.Numel() == 1, kRuntime, "op 'fill_constant': input ValueTensor (var '",
                  ctx.Op().Input("ValueTensor")[0],
                  "') must be one element of float32, float64, int32, int64 or bool, but received ", t.DebugString());
    if (d == DType::kFloat32) v.d = t.template Data<float>()[0];
    if (d == DType::kFloat64) v.d = t.template Data<double>()[0];
    if (d == DType::kInt32) v = opkit::NumberText{true, t.template Data<int32_t>()[0], 0.0};
    if (d == DType::kInt64) v = opkit::NumberText{true, t.template Data<int64_t>()[0], 0.0};
    if (d == DType::kBool) v = opkit::NumberText{true, t.template Data<bool>()[0] ? 1 : 0, 0.0};
    if (v.is_int) v.d = static_cast<double>(v.i);
    return v;
  }
  const std::string s = ctx.Attr<std::string>("str_value");
  if (!s.empty()) {
    NABLA_ENFORCE(opkit::ParseNumberText(s, &v), kInvalidArgument,
                  "op 'fill_constant': attribute str_value must be a number, but received '", s, "'");
    return v;
  }
  v.d = ctx.Attr<float>("value");
  return v;
}

}  // namespace nabla::math_ops
