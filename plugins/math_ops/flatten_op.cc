// flatten: X as a matrix, the dims before `axis` becoming its rows and the
// rest its columns. Out is a view of X's buffer.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

Shape FlattenedShape(const Shape& x, const OpDesc& op, const std::string& where) {
  const int axis = op.Attr<int>("axis");
  const int r = static_cast<int>(x.size());
  NABLA_ENFORCE(axis >= 0 && axis <= r, kOutOfRange, where, ": attribute axis must be in [0, ", r, "] for X of shape ",
                ShapeToString(x), ", but received ", axis);
  return {ProductOf(x, 0, axis), ProductOf(x, axis, x.size())};
}

NABLA_REGISTER_OPS(flatten) {
  RegisterViewOp(
      registrar, "flatten",
      "Out = X reshaped to 2-D: [d0 * ... * d(axis-1), d(axis) * ... * dn] (axis 0 gives [1, numel]).", __FILE__,
      __LINE__, FlattenedShape,
      [](OpBuilder& b) {
        b.Attr<int>("axis", 1,
                    "(int, default 1) the dims of X before axis become Out's rows, the rest its columns; in [0, rank]");
      })
      .GradCheck(CheckCase("axis2", {CheckInput("X", {2, 3, 2})}, {{"axis", 2}}))
      .GradCheck(CheckCase("axis0", {CheckInput("X", {2, 3})}, {{"axis", 0}}));
}

}  // namespace
}  // namespace nabla::math_ops
