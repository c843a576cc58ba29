// clip: Out = min(max(X, min), max), Paddle's clip op. Besides clipping
// values it gives max(x, c) as clip(x, min=c, max=FLT_MAX), which global-norm
// gradient clipping needs: scale = clip_norm / max(global_norm, clip_norm).
#include <algorithm>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void ClipKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T lo = static_cast<T>(ctx.Attr<float>("min"));
  const T hi = static_cast<T>(ctx.Attr<float>("max"));
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
  const T lo = static_cast<T>(ctx.Attr<float>("min"));
  const T hi = static_cast<T>(ctx.Attr<float>("max"));
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
    return OneOp("clip_grad", {{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

}  // namespace

NABLA_REGISTER_OPS(clip) {
  GradCheckSpec spec = CheckCase("both_bounds", {AwayFromKinks(CheckInput("X", {4, 5}), {-0.5, 0.4}, 0.01)},
                                 {{"min", -0.5f}, {"max", 0.4f}});
  registrar.Op("clip", __FILE__, __LINE__)
      .Doc("Clamps X elementwise into [min, max].")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) X clamped, shape and dtype of X")
      .RequiredAttr<float>("min", "(float, required) the lower bound")
      .RequiredAttr<float>("max", "(float, required) the upper bound, >= min")
      .InferShape([](InferShapeContext& c) {
        EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
        NABLA_ENFORCE(c.Attr<float>("min") <= c.Attr<float>("max"), kInvalidArgument, c.Where(),
                      ": attribute min must not exceed max, but received min ", c.Attr<float>("min"), " and max ",
                      c.Attr<float>("max"));
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
