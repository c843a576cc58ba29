// unsqueeze: X with size-1 dims inserted at `axes`. Out is a view of X's
// buffer; the gradient views Out@GRAD in X's shape.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Paddle's rule: the axes are inserted one after the other, each one an
// index into the shape built so far (negative: counted from its end, so -1
// appends).
Shape UnsqueezedShape(const Shape& x, const OpDesc& op, const std::string& where) {
  const auto& axes = op.Attr<std::vector<int>>("axes");
  NABLA_ENFORCE(!axes.empty(), kInvalidArgument, where,
                ": attribute axes must name at least one dim to insert, but received []");
  Shape out = x;
  for (int a : axes) {
    const int r = static_cast<int>(out.size()) + 1;
    NABLA_ENFORCE(a >= -r && a < r, kOutOfRange, where, ": attribute axes entry ", a, " must be in [", -r, ", ", r,
                  ") when inserted into shape ", ShapeToString(out), " (X shape ", ShapeToString(x), "), but received ",
                  a);
    out.insert(out.begin() + (a < 0 ? a + r : a), 1);
  }
  return out;
}

NABLA_REGISTER_OPS(unsqueeze) {
  RegisterViewOp(registrar, "unsqueeze",
                 "Out = X with a size-1 dim inserted at each of `axes`, in order: each axis indexes the shape "
                 "built so far (negative counts from its end).",
                 __FILE__, __LINE__, UnsqueezedShape,
                 [](OpBuilder& b) {
                   b.Attr<std::vector<int>>(
                       "axes", {},
                       "(ints, default []) where to insert size-1 dims, applied in order; must not be empty");
                 })
      .GradCheck(CheckCase("front_and_back", {CheckInput("X", {2, 3})}, {{"axes", std::vector<int>{0, -1}}}))
      .GradCheck(CheckCase("middle", {CheckInput("X", {2, 3})}, {{"axes", std::vector<int>{1}}}));
}

}  // namespace
}  // namespace nabla::math_ops
