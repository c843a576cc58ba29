// scale: Out = scale * X + bias (or scale * (X + bias)).
#include <cmath>
#include <limits>
#include <type_traits>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Names the kernel reads on every call, built once: a literal would build
// a std::string per read, on the heap for "bias_after_scale".
const std::string kScaleTensor = "ScaleTensor", kScale = "scale", kBias = "bias", kAfter = "bias_after_scale", kX = "X",
                  kOut = "Out";

// scale or bias as an integer X's dtype, as Paddle's kernel takes them
// (scale.to<T>(), static_cast<T>(bias)): truncated toward zero, so scale 2.5
// doubles and scale 0.5 zeroes. A value T cannot hold is an error rather
// than an undefined conversion.
template <typename T>
T IntegerFactor(double v, const std::string& what) {
  const double t = std::trunc(v);
  constexpr double kLow = static_cast<double>(std::numeric_limits<T>::lowest());
  NABLA_ENFORCE(t >= kLow && t < -kLow, kInvalidArgument, "op 'scale': ", what, " must lie in the range of X's dtype ",
                DTypeName(DTypeOf<T>::value), " (an integer X scales by scale and bias truncated to it, as Paddle), ",
                "but received ", v);
  return static_cast<T>(t);
}

// Integers wrap as Paddle's (two's complement), computed unsigned so that
// an overflow is no undefined behaviour.
template <typename T>
T ScaleInt(T x, T scale, T bias, bool after) {
  using U = std::make_unsigned_t<T>;
  const U ux = static_cast<U>(x), us = static_cast<U>(scale), ub = static_cast<U>(bias);
  return static_cast<T>(after ? us * ux + ub : us * (ux + ub));
}

template <typename T>
struct ScaleKernel {
  void operator()(const ExecutionContext& ctx) const {
    const double scale_value = *FloatAttrOrTensor(ctx, kScaleTensor, kScale);
    const double bias_value = ctx.Attr<float>(kBias);
    bool after = ctx.Attr<bool>(kAfter);
    const Tensor& x = ctx.Input(kX);
    const T* xd = x.Data<T>();
    T* o = AllocOutput<T>(ctx, ctx.Output(kOut), x.GetShape());
    int64_t n = x.Numel();
    if constexpr (std::is_integral_v<T>) {
      const T scale = IntegerFactor<T>(scale_value, "scale"), bias = IntegerFactor<T>(bias_value, "bias");
      cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) o[i] = ScaleInt(xd[i], scale, bias, after);
      });
    } else {
      const T scale = static_cast<T>(scale_value), bias = static_cast<T>(bias_value);
      cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
        if (after) {
          for (int64_t i = b; i < e; ++i) o[i] = scale * xd[i] + bias;
        } else {
          for (int64_t i = b; i < e; ++i) o[i] = scale * (xd[i] + bias);
        }
      });
    }
  }
};

// X@GRAD = scale * Out@GRAD: another scale op, without the bias, reading
// the forward op's ScaleTensor where it has one.
std::unique_ptr<OpDesc> ScaleGradOp(const GradContext& g, const std::vector<std::string>& dx) {
  VarNameMap inputs{{"X", g.OutputGrad("Out")}};
  if (g.ForwardOp().HasInput("ScaleTensor")) inputs["ScaleTensor"] = g.Input("ScaleTensor");
  return MakeOp("scale", std::move(inputs), {{"Out", dx}},
                {{"scale", g.Attr<float>("scale")}, {"bias", 0.0f}, {"bias_after_scale", true}});
}

NABLA_REGISTER_OPS(scale) {
  registrar.Op("scale", __FILE__, __LINE__)
      .Doc(
          "Out = scale * X + bias when bias_after_scale, else Out = scale * (X + bias). An integer X takes scale and "
          "bias truncated to its dtype first, as Paddle.")
      .Input("X", "(Tensor) the input")
      .Input("ScaleTensor",
             "(Tensor<float32|float64>, optional) one element: the factor at run time; before attribute scale; no "
             "gradient",
             kTensorAttrInput)
      .Output("Out", "(Tensor) the scaled input, of the shape of X")
      .Attr<float>("scale", 1.0f, "(float, default 1.0) the factor")
      .Attr<float>("bias", 0.0f, "(float, default 0.0) the offset")
      .Attr<bool>("bias_after_scale", true, "(bool, default true) add the bias after scaling; false adds it before")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker(OneGradOpIfWanted("X", ScaleGradOp))
      .GradCheck(CheckCase("scale_bias", {CheckInput("X", {2, 3})}, {{"scale", 2.5f}, {"bias", 0.5f}}))
      .GradCheck(CheckCase("bias_before", {CheckInput("X", {4})},
                           {{"scale", -1.5f}, {"bias", 2.0f}, {"bias_after_scale", false}}));
  RegisterCpuKernels<ScaleKernel, float, double, int32_t, int64_t>(registrar, "scale", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
