// log: Out = ln(X), elementwise (X > 0).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(log) {
  RegisterUnaryOp(
      registrar, "log", "Out = ln(X), elementwise (X > 0).", __FILE__, __LINE__, [](auto x) { return std::log(x); },
      [](auto x, auto, auto dout) { return dout / x; })
      .GradCheck(CheckCase("positive", {CheckInput("X", {2, 3}, 0.5, 2.0)}));
}

}  // namespace
}  // namespace nabla::math_ops
