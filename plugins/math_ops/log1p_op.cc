// log1p: Out = ln(1 + X), elementwise (X > -1), accurate for small X. The gradient reads X:
// X@GRAD = Out@GRAD / (1 + X).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(log1p) {
  RegisterActivation(
      registrar, "log1p", "Out = ln(1 + X), elementwise (X > -1), accurate where X is near 0.", __FILE__, __LINE__, {},
      GradReads::kX, [](auto x, const auto&) { return std::log1p(x); },
      [](auto x, auto dout, const auto&) { return dout / (decltype(x)(1) + x); })
      // Away from -1, where the derivative is infinite.
      .GradCheck(CheckCase("above_minus_one", {CheckInput("X", {2, 3}, -0.5, 2.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
