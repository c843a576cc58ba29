// elementwise_div: Out = X / Y with Paddle's axis broadcasting. Integer
// division is Paddle's: C++'s `/`, truncating toward zero (-7 / 2 = -3, where
// Python's // gives -4), and a zero divisor is an error rather than a trap.
#include <type_traits>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

template <typename T>
struct IntDivKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const T* yd = y.Data<T>();
    // Every element of Y is read once Out has any element (broadcasting only
    // repeats them), so a zero anywhere in Y would divide.
    if (x.Numel() > 0)
      for (int64_t i = 0, n = y.Numel(); i < n; ++i)
        NABLA_ENFORCE(yd[i] != 0, kInvalidArgument,
                      "op 'elementwise_div': integer division by zero: Y must have no zero element, but received "
                      "Y[",
                      i, "] = 0 (Y of shape ", ShapeToString(y.GetShape()), ")");
    // The lowest value divided by -1 overflows, and the CPU traps on it:
    // negate in unsigned arithmetic instead, which wraps as two's complement.
    ElementwiseForward<T>(ctx, [](T a, T b) {
      using U = std::make_unsigned_t<T>;
      return b == T(-1) ? static_cast<T>(U(0) - static_cast<U>(a)) : static_cast<T>(a / b);
    });
  }
};

NABLA_REGISTER_OPS(elementwise_div) {
  RegisterElementwiseOp(
      registrar, "elementwise_div",
      "Out = X / Y (elementwise). Y is broadcast onto X: its dims align with X's starting at `axis`. Integers "
      "divide as C++ does (truncating toward zero); a zero integer divisor is an error.",
      __FILE__, __LINE__, /*int_kernels=*/false, [](auto x, auto y) { return x / y; },
      [](auto, auto y, auto dout) { return dout / y; }, [](auto x, auto y, auto dout) { return -dout * x / (y * y); })
      // Y stays away from 0, where the quotient blows up.
      .GradCheck(CheckCase("same_shape", {CheckInput("X", {2, 3}), CheckInput("Y", {2, 3}, 0.5, 2.0)}))
      .GradCheck(
          CheckCase("broadcast_axis1", {CheckInput("X", {2, 3, 2}), CheckInput("Y", {3}, 0.5, 2.0)}, {{"axis", 1}}));
  RegisterCpuKernels<IntDivKernel, int32_t, int64_t>(registrar, "elementwise_div", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
