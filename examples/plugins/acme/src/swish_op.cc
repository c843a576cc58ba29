// acme_swish: Out = X * sigmoid(beta * X), elementwise (Ramachandran et al.,
// "Searching for activation functions"). Its gradient is an op of its own,
// acme_swish_grad, with CPU kernels for float32 and float64.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "nabla/plugin.h"

namespace acme {
namespace {

using nabla::DeviceType;
using nabla::DType;
using nabla::ExecutionContext;
using nabla::GradVarName;
using nabla::InferShapeContext;
using nabla::OpDesc;
using nabla::Tensor;

// Never exponentiates a positive number, so it cannot overflow.
template <typename T>
T Sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <typename T>
void SwishKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T beta = static_cast<T>(ctx.Attr<float>("beta"));
  const T* px = x.Data<T>();
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0, n = x.Numel(); i < n; ++i) out[i] = px[i] * Sigmoid(beta * px[i]);
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
  for (int64_t i = 0, n = x.Numel(); i < n; ++i) {
    const T s = Sigmoid(beta * px[i]);
    pdx[i] = pdout[i] * (s + beta * px[i] * s * (T(1) - s));
  }
}

// acme_swish_grad reads X and Out@GRAD (not Out) and writes X@GRAD.
class SwishGradMaker : public nabla::GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>(
        "acme_swish_grad", nabla::VarNameMap{{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}},
        nabla::VarNameMap{{GradVarName("X"), InputGrad("X")}}, Attrs()));
    return ops;
  }
};

nabla::GradCheckSpec SwishCheck(const std::string& name, float beta) {
  nabla::GradCheckSpec spec;
  spec.name = name;
  nabla::GradCheckInput x;
  x.slot = "X";
  x.shape = {3, 4};
  x.low = -3.0;
  x.high = 3.0;
  spec.inputs = {x};
  spec.outputs = {{"Out", 1}};
  spec.attrs = {{"beta", beta}};
  return spec;
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
  registrar.Kernel("acme_swish", DeviceType::kCPU, DType::kFloat32, SwishKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("acme_swish", DeviceType::kCPU, DType::kFloat64, SwishKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("acme_swish_grad", DeviceType::kCPU, DType::kFloat32, SwishGradKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("acme_swish_grad", DeviceType::kCPU, DType::kFloat64, SwishGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace acme
