// squared_l2_norm: Out = sum(X^2), one element. A building block for
// global-norm gradient clipping as a pass of ops: sum the squared norms of
// all gradients, sqrt, then scale each gradient (see clip_op.cc).
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void SquaredL2NormKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* px = x.Data<T>();
  double sum = 0.0;
  const int64_t n = x.Numel();
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(px[i]) * static_cast<double>(px[i]);
  ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), {1})[0] = static_cast<T>(sum);
}

template <typename T>
void SquaredL2NormGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  const T two_dout = T(2) * ctx.Input(GradVarName("Out")).Data<T>()[0];
  const T* px = x.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const int64_t n = x.Numel();
  for (int64_t i = 0; i < n; ++i) pdx[i] = two_dout * px[i];
}

class SquaredL2NormGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp("squared_l2_norm_grad", {{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

}  // namespace

NABLA_REGISTER_OPS(squared_l2_norm) {
  GradCheckSpec spec = CheckCase("matrix", {CheckInput("X", {3, 4})});
  registrar.Op("squared_l2_norm", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .Doc("Squared L2 norm of all of X: Out = sum(X * X), accumulated in double.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) one element [1], dtype of X")
      .InferShape([](InferShapeContext& c) {
        EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
        c.SetOutputShape("Out", {1});
        c.SetOutputDType("Out", c.InputDType("X"));
      })
      .GradMaker<SquaredL2NormGradMaker>()
      .GradCheck(spec);
  registrar.DefaultGradOp("squared_l2_norm", __FILE__, __LINE__)
      .Doc("Gradient of squared_l2_norm: X@GRAD = 2 * Out@GRAD * X.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "X", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "squared_l2_norm", SquaredL2NormKernel<float>, SquaredL2NormKernel<double>, __FILE__,
                       __LINE__);
  RegisterFloatKernels(registrar, "squared_l2_norm_grad", SquaredL2NormGradKernel<float>,
                       SquaredL2NormGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
