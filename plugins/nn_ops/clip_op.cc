// clip: Out = min(max(X, min), max), Paddle's clip op. Besides clipping
// values it gives max(x, c) as clip(x, min=c, max=FLT_MAX), which global-norm
// gradient clipping needs: scale = clip_norm / max(global_norm, clip_norm).
#include <algorithm>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

// The bounds: inputs Min and Max (one element each) where given, else the
// attributes; min must not exceed max.
template <typename Ctx>
std::pair<AttrValue<double>, AttrValue<double>> Bounds(const Ctx& c, const std::string& where) {
  auto lo = FloatAttrOrTensor(c, "Min", "min"), hi = FloatAttrOrTensor(c, "Max", "max");
  NABLA_ENFORCE_VALUE(!lo.Known() || !hi.Known() || *lo <= *hi, lo.FromInput() ? lo : hi, where, ": ", lo.source,
                      " must not exceed ", hi.source, ", but received min ", *lo, " and max ", *hi);
  return {lo, hi};
}

template <typename T>
void ClipKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const auto [min, max] = Bounds(ctx, "op 'clip'");
  const T lo = static_cast<T>(*min), hi = static_cast<T>(*max);
  const T* px = x.Data<T>();
  T* po = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const int64_t n = x.Numel();
  for (int64_t i = 0; i < n; ++i) po[i] = std::min(std::max(px[i], lo), hi);
}

// Paddle's rule: the gradient passes strictly inside (min, max).
template <typename T>
void ClipGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  const auto [min, max] = Bounds(ctx, "op 'clip_grad'");
  const T lo = static_cast<T>(*min), hi = static_cast<T>(*max);
  const T* px = x.Data<T>();
  const T* pd = ctx.Input(GradVarName("Out")).Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const int64_t n = x.Numel();
  for (int64_t i = 0; i < n; ++i) pdx[i] = (px[i] > lo && px[i] < hi) ? pd[i] : T(0);
}

class ClipGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    VarNameMap inputs{{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}};
    // The bounds the forward op read, where they are inputs.
    for (const char* slot : {"Min", "Max"})
      if (ForwardOp().HasInput(slot)) inputs[slot] = Input(slot);
    return OneOp("clip_grad", std::move(inputs), {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

}  // namespace

NABLA_REGISTER_OPS(clip) {
  GradCheckSpec spec = CheckCase("both_bounds", {AwayFromKinks(CheckInput("X", {4, 5}), {-0.5, 0.4}, 0.01)},
                                 {{"min", -0.5f}, {"max", 0.4f}});
  registrar.Op("clip", __FILE__, __LINE__)
      .Doc("Clamps X elementwise into [min, max].")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Input("Min",
             "(Tensor<float32|float64>, optional) one element: the lower bound at run time; before attribute min; "
             "no gradient",
             kTensorAttrInput)
      .Input("Max",
             "(Tensor<float32|float64>, optional) one element: the upper bound at run time; before attribute max; "
             "no gradient",
             kTensorAttrInput)
      .Output("Out", "(Tensor) X clamped, shape and dtype of X")
      .RequiredAttr<float>("min", "(float, required) the lower bound")
      .RequiredAttr<float>("max", "(float, required) the upper bound, >= min")
      .InferShape([](InferShapeContext& c) {
        EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
        Bounds(c, c.Where());
        c.ShareShapeAndDType("X", "Out");
      })
      .GradMaker<ClipGradMaker>()
      .GradCheck(spec);
  registrar.DefaultGradOp("clip", __FILE__, __LINE__)
      .Doc("Gradient of clip: X@GRAD = Out@GRAD where min < X < max, else 0.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "X", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "clip", ClipKernel<float>, ClipKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "clip_grad", ClipGradKernel<float>, ClipGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
