// acme_swish: Out = X * sigmoid(beta * X), elementwise (Ramachandran et al.,
// "Searching for activation functions"). Its gradient is an op of its own,
// acme_swish_grad, with CPU kernels for float32 and float64. Helpers come
// from the op kit (nabla/opkit, target nabla::opkit).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "nabla/opkit/opkit.h"
#include "nabla/plugin.h"

namespace acme {
namespace {

using nabla::ExecutionContext;
using nabla::GradVarName;
using nabla::InferShapeContext;
using nabla::OpDesc;
using nabla::Tensor;

using nabla::opkit::Sigmoid;  // never exponentiates a positive number

template <typename T>
void SwishKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T beta = static_cast<T>(ctx.Attr<float>("beta"));
  const T* px = x.Data<T>();
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  nabla::opkit::ParallelElementwise(x.Numel(), [&](int64_t i) { out[i] = px[i] * Sigmoid(beta * px[i]); });
}

// d/dx x*s(bx) = s + b*x*s*(1-s), with s = s(bx).
template <typename T>
void SwishGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;  // @EMPTY@: nobody needs it
  const Tensor& x = ctx.Input("X");
  const T beta = static_cast<T>(ctx.Attr<float>("beta"));
  const T* px = x.Data<T>();
  const T* pdout = ctx.Input(GradVarName("Out")).Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
  nabla::opkit::ParallelElementwise(x.Numel(), [&](int64_t i) {
    const T s = Sigmoid(beta * px[i]);
    pdx[i] = pdout[i] * (s + beta * px[i] * s * (T(1) - s));
  });
}

// acme_swish_grad reads X and Out@GRAD (not Out) and writes X@GRAD.
class SwishGradMaker : public nabla::GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return nabla::opkit::OneOp("acme_swish_grad", {{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}},
                               {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

nabla::GradCheckSpec SwishCheck(const std::string& name, float beta) {
  return nabla::opkit::CheckCase(name, {nabla::opkit::CheckInput("X", {3, 4}, -3.0, 3.0)}, {{"beta", beta}});
}

}  // namespace

NABLA_REGISTER_OPS(acme_swish) {
  registrar.Op("acme_swish", __FILE__, __LINE__)
      .Doc("Swish activation: Out = X * sigmoid(beta * X), elementwise.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) swish(X), shape and dtype of X")
      .Attr<float>("beta", 1.0f, "(float, default 1.0) slope inside the sigmoid")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<SwishGradMaker>()
      .GradCheck(SwishCheck("beta_1", 1.0f))
      .GradCheck(SwishCheck("beta_1_5", 1.5f));
  registrar.Op("acme_swish_grad", __FILE__, __LINE__)
      .Doc("Gradient of acme_swish: X@GRAD = Out@GRAD * (s + beta * X * s * (1 - s)), s = sigmoid(beta * X).")
      .Input("X", "(Tensor) the forward input")
      .Input(GradVarName("Out"), "(Tensor) gradient of Out")
      .Output(GradVarName("X"), "(Tensor) gradient of X", nabla::kDispensable)
      .Attr<float>("beta", 1.0f, "(float, default 1.0) slope inside the sigmoid")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", GradVarName("X")); });
  nabla::opkit::RegisterFloatKernels(registrar, "acme_swish", SwishKernel<float>, SwishKernel<double>, __FILE__,
                                     __LINE__);
  nabla::opkit::RegisterFloatKernels(registrar, "acme_swish_grad", SwishGradKernel<float>, SwishGradKernel<double>,
                                     __FILE__, __LINE__);
}

}  // namespace acme
