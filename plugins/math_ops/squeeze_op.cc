// squeeze: X without the size-1 dims named by `axes` (all size-1 dims when
// `axes` is empty). Out is a view of X's buffer; the gradient views
// Out@GRAD in X's shape.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// A dim unknown at build time (-1) named in `axes` is assumed to be 1 (the
// run-time check catches it otherwise); with `axes` empty it is assumed not
// to be 1, so build time never drops a dim that run time might keep.
Shape SqueezedShape(const Shape& x, const OpDesc& op, const std::string& where) {
  const auto& axes = op.Attr<std::vector<int>>("axes");
  std::vector<bool> drop(x.size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < x.size(); ++i) drop[i] = x[i] == 1;
  }
  for (int a : axes) {
    const int d = NormalizeAxis(a, x.size(), "axes", where);
    NABLA_ENFORCE(x[d] == 1 || x[d] < 0, kInvalidArgument, where, ": attribute axes names dim ", a, " of X (shape ",
                  ShapeToString(x), "), which must be 1 to be squeezed, but received ", x[d]);
    drop[d] = true;
  }
  Shape out;
  for (size_t i = 0; i < x.size(); ++i)
    if (!drop[i]) out.push_back(x[i]);
  if (out.empty()) out.push_back(1);  // nabla never makes rank-0 tensors
  return out;
}

NABLA_REGISTER_OPS(squeeze) {
  RegisterViewOp(registrar, "squeeze",
                 "Out = X without the size-1 dims named by `axes`, or without every size-1 dim when `axes` is "
                 "empty; squeezing every dim gives shape [1].",
                 __FILE__, __LINE__, SqueezedShape,
                 [](OpBuilder& b) {
                   b.Attr<std::vector<int>>(
                       "axes", {},
                       "(ints, default []) the dims to remove, each of size 1; negative dims count from the "
                       "end; empty removes every size-1 dim");
                 })
      .GradCheck(CheckCase("named_axes", {CheckInput("X", {2, 1, 3, 1})}, {{"axes", std::vector<int>{1, -1}}}))
      .GradCheck(CheckCase("all_ones", {CheckInput("X", {1, 3, 1})}));
}

}  // namespace
}  // namespace nabla::math_ops
