#pragma once
// fill_constant's value, read once for its CPU and OpenCL kernels: the
// ValueTensor input, else attribute str_value, else attribute value.
// value is a float attribute (Paddle's), so an int64 such as 123456789 or a
// float64 such as 0.1 does not survive it; str_value carries such values
// exactly, as Paddle's Python layer writes it.
#include <string>

#include "nabla/opkit/attr_tensor.h"
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
  const std::string s = ctx.Attr<std::string>("str_value");
  if (!ctx.HasInput("ValueTensor") && !s.empty()) {
    NABLA_ENFORCE(opkit::ParseNumberText(s, &v), kInvalidArgument,
                  "op 'fill_constant': attribute str_value must be a number, but received '", s, "'");
    return v;
  }
  v.d = *opkit::FloatAttrOrTensor(ctx, "ValueTensor", "value");
  return v;
}

}  // namespace nabla::math_ops
