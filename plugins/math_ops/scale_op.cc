// scale: Out = scale * X + bias (or scale * (X + bias)).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

template <typename T>
struct ScaleKernel {
  void operator()(const ExecutionContext& ctx) const {
    // Integers scale in double and round toward zero, so scale 0.5 halves them
    // instead of zeroing them.
    using Acc = std::conditional_t<std::is_integral_v<T>, double, T>;
    Acc scale = static_cast<Acc>(*FloatAttrOrTensor(ctx, "ScaleTensor", "scale"));
    Acc bias = static_cast<Acc>(ctx.Attr<float>("bias"));
    bool after = ctx.Attr<bool>("bias_after_scale");
    const Tensor& x = ctx.Input("X");
    const T* xd = x.Data<T>();
    T* o = AllocOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
    int64_t n = x.Numel();
    cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
      cpu::RunSimd([&] {
        if (after) {
          for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(scale * static_cast<Acc>(xd[i]) + bias);
        } else {
          for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(scale * (static_cast<Acc>(xd[i]) + bias));
        }
      });
    });
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
      .Doc("Out = scale * X + bias when bias_after_scale, else Out = scale * (X + bias).")
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
