// exp: Out = e^X, elementwise.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(exp) {
  RegisterUnaryOp(
      registrar, "exp", "Out = e^X, elementwise.", __FILE__, __LINE__, [](auto x) { return std::exp(x); },
      [](auto, auto out, auto dout) { return dout * out; })
      .GradCheck(CheckCase("matrix", {CheckInput("X", {2, 3})}));
}

}  // namespace
}  // namespace nabla::math_ops
