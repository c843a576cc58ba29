// dropout with Paddle's two conventions:
//   downgrade_in_infer (Paddle's default): train Out = X * Mask, test Out = X * (1 - p);
//   upscale_in_train (PyTorch's):          train Out = X * Mask / (1 - p), test Out = X.
// Mask holds 1 for kept and 0 for dropped elements. Paddle stores it as
// uint8; nabla has no uint8, so it takes X's dtype. The gradient reads only
// Mask: X@GRAD = Out@GRAD * Mask (/ (1 - p) when upscaling).

#include "dropout.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void DropoutKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const double p = ctx.Attr<float>("dropout_prob");
  const bool upscale = DropoutUpscales(ctx);
  const int64_t n = x.Numel();
  const T* px = x.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), x.GetShape());
  if (ctx.Attr<bool>("is_test")) {
    const T s = upscale ? T(1) : static_cast<T>(1.0 - p);
    for (int64_t i = 0; i < n; ++i) po[i] = px[i] * s;
    return;
  }
  Tensor* mask = ctx.Output("Mask");
  NABLA_ENFORCE(mask != nullptr, kInvalidArgument,
                "dropout in training (is_test false) needs a Mask output for its gradient, but none was given");
  T* pm = mask->Allocate<T>(ctx.GetDevice(), x.GetShape());
  DrawDropoutMask(ctx, n, p, pm);
  // p == 1 drops everything; dividing by 1 - p would give 0 * inf = NaN.
  const T keep_scale = (upscale && p < 1.0) ? static_cast<T>(1.0 / (1.0 - p)) : T(1);
  for (int64_t i = 0; i < n; ++i) po[i] = pm[i] != T(0) ? px[i] * keep_scale : T(0);
}

template <typename T>
void DropoutGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  NABLA_ENFORCE(!ctx.Attr<bool>("is_test"), kPreconditionNotMet,
                "dropout_grad needs a training-mode dropout (is_test false), but is_test is true");
  const Tensor& mask = ctx.Input("Mask");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const double p = ctx.Attr<float>("dropout_prob");
  const bool upscale = DropoutUpscales(ctx);
  const T s = (upscale && p < 1.0) ? static_cast<T>(1.0 / (1.0 - p)) : T(1);
  const T* pm = mask.Data<T>();
  const T* pd = dout.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), mask.GetShape());
  const int64_t n = mask.Numel();
  for (int64_t i = 0; i < n; ++i) pdx[i] = pd[i] * pm[i] * s;
}

void InferDropout(InferShapeContext& c) {
  EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
  c.ShareShapeAndDType("X", "Out");
  if (c.HasOutput("Mask")) c.ShareShapeAndDType("X", "Mask");
}

class DropoutGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp("dropout_grad", {{"Mask", Output("Mask")}, {GradVarName("Out"), OutputGrad("Out")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

}  // namespace

NABLA_REGISTER_OPS(dropout) {
  GradCheckSpec down = CheckCase("downgrade_in_infer", {CheckInput("X", {4, 5})}, {}, {{"Out", 1}, {"Mask", 1}});
  down.no_grad_outputs = {"Mask"};
  down.attrs = {{"dropout_prob", 0.3f}, {"fix_seed", true}, {"seed", 7}};
  GradCheckSpec up = down;
  up.name = "upscale_in_train";
  up.attrs["dropout_implementation"] = std::string("upscale_in_train");
  registrar.Op("dropout", __FILE__, __LINE__)
      .Doc(
          "Randomly zeroes elements of X with probability dropout_prob in training; see dropout_implementation "
          "for how kept values and test-time outputs are scaled.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Input("Seed",
             "(Tensor<int32|int64>, optional) one element: the mask's seed at run time; before fix_seed and seed",
             kTensorAttrInput)
      .Output("Out", "(Tensor) the dropped-out X, shape and dtype of X")
      .Output("Mask", "(Tensor) 1 where X was kept, 0 where dropped; shape and dtype of X. Written in training only",
              kDispensable)
      .Attr<float>("dropout_prob", 0.5f, "(float, default 0.5) probability of dropping an element, in [0, 1]",
                   [](const float& p) {
                     NABLA_ENFORCE(p >= 0.0f && p <= 1.0f, kInvalidArgument,
                                   "attribute dropout_prob must be in [0, 1], but received ", p);
                   })
      .Attr<bool>("is_test", false, "(bool, default false) inference mode: no mask, deterministic scaling")
      .Attr<bool>("fix_seed", false, "(bool, default false) draw the mask from `seed` on every run")
      .Attr<int>("seed", 0,
                 "(int, default 0) the mask's seed when fix_seed is true; otherwise a non-zero seed still fixes "
                 "it and 0 derives one from the run's seed and step (nabla run: the optimizer step, which a "
                 "resumed run takes again, and the data-parallel rank; elsewhere the executor's count of runs)")
      .Attr<std::string>("dropout_implementation", "downgrade_in_infer",
                         "(string, default \"downgrade_in_infer\") \"downgrade_in_infer\": scale by (1 - p) at test "
                         "time; \"upscale_in_train\": scale kept values by 1 / (1 - p) in training",
                         [](const std::string& s) {
                           NABLA_ENFORCE(s == "downgrade_in_infer" || s == "upscale_in_train", kInvalidArgument,
                                         "attribute dropout_implementation must be \"downgrade_in_infer\" or "
                                         "\"upscale_in_train\", but received \"",
                                         s, "\"");
                         })
      .InferShape(InferDropout)
      .GradMaker<DropoutGradMaker>()
      .Random()
      .GradCheck(down)
      .GradCheck(up);
  registrar.DefaultGradOp("dropout", __FILE__, __LINE__)
      .Doc("Gradient of dropout: X@GRAD = Out@GRAD * Mask, divided by (1 - p) with upscale_in_train.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "Mask", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "dropout", DropoutKernel<float>, DropoutKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "dropout_grad", DropoutGradKernel<float>, DropoutGradKernel<double>, __FILE__,
                       __LINE__);
}

}  // namespace nabla::nn
