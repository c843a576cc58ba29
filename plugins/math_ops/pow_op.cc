// pow: Out = X^factor, elementwise, with the float attribute `factor`. The
// gradient reads X (Paddle's pow_grad): X@GRAD = Out@GRAD * factor * X^(factor - 1).
// Paddle's optional FactorTensor input is not here: the exponent is the
// attribute only. Integer X gets forward kernels, as in Paddle, which raise
// to the factor cast to the integer type (truncated toward zero).
#include <type_traits>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// The largest exponent an integer X takes: Paddle casts the factor to
// int32/int64, so it must fit there; 2^31 fits both.
constexpr double kMaxIntExponent = 2147483647.0;

template <typename T>
void IntPowKernel(const ExecutionContext& ctx) {
  const float factor = ctx.Attr<float>("factor");
  const double e = std::trunc(static_cast<double>(factor));
  NABLA_ENFORCE(e >= 0 && e <= kMaxIntExponent, kInvalidArgument, "op 'pow': an ", DTypeName(DTypeOf<T>::value),
                " X takes factor truncated to an exponent in [0, 2^31), but received factor ", factor);
  const uint64_t n = static_cast<uint64_t>(e);
  const Tensor& x = ctx.Input("X");
  const T* px = x.Data<T>();
  T* po = AllocOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
  // Square-and-multiply in the unsigned type: an overflow wraps as the
  // integer multiplications of Paddle's kernel would, without signed UB.
  using U = std::make_unsigned_t<T>;
  ParallelElementwise(x.Numel(), [&](int64_t i) {
    U base = static_cast<U>(px[i]), acc = 1;
    for (uint64_t k = n; k; k >>= 1) {
      if (k & 1) acc = static_cast<U>(acc * base);
      base = static_cast<U>(base * base);
    }
    po[i] = static_cast<T>(acc);
  });
}

}  // namespace

NABLA_REGISTER_OPS(pow) {
  GradCheckSpec cube = CheckCase("cube", {CheckInput("X", {2, 3}, -2.0, 2.0)}, {{"factor", 3.0f}});
  // A fractional or negative exponent needs X > 0.
  GradCheckSpec fractional = CheckCase("fractional", {CheckInput("X", {2, 3}, 0.5, 2.0)}, {{"factor", 2.5f}});
  GradCheckSpec negative = CheckCase("negative_factor", {CheckInput("X", {2, 3}, 0.5, 2.0)}, {{"factor", -1.5f}});
  RegisterActivation(
      registrar, "pow",
      "Power, elementwise: Out = X^factor. Integer X (forward only) is raised to factor truncated to an integer.",
      __FILE__, __LINE__, {{"factor", 1.0f, "(float, default 1.0) the exponent"}}, GradReads::kX,
      [](auto x, const auto& a) { return std::pow(x, a[0]); },
      [](auto x, auto dout, const auto& a) { return dout * a[0] * std::pow(x, a[0] - decltype(x)(1)); })
      .GradCheck(CheckCase("identity", {CheckInput("X", {2, 3})}))
      .GradCheck(cube)
      .GradCheck(fractional)
      .GradCheck(negative);
  registrar.Kernel("pow", DeviceType::kCPU, DType::kInt32, IntPowKernel<int32_t>, __FILE__, __LINE__);
  registrar.Kernel("pow", DeviceType::kCPU, DType::kInt64, IntPowKernel<int64_t>, __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
