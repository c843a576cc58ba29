// A third-party plugin as `nabla gradcheck --plugin` meets it: acme_cube
// (Out = X^3) with a right gradient and acme_bad_cube whose gradient kernel
// is off by 10 %, each with a GradCheck case, float64 on the CPU.
#include "nabla/plugin.h"
#include "nabla/tensor.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;

void Cube(const ExecutionContext& ctx) {
  const nabla::Tensor& x = ctx.Input("X");
  const double* in = x.Data<double>();
  double* out = ctx.Output("Out")->Allocate<double>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) out[i] = in[i] * in[i] * in[i];
}

// dX = factor * X^2 * dOut; the right factor is 3.
void CubeGrad(const ExecutionContext& ctx, double factor) {
  const nabla::Tensor& x = ctx.Input("X");
  const double* in = x.Data<double>();
  const double* dout = ctx.Input("Out@GRAD").Data<double>();
  double* dx = ctx.Output("X@GRAD")->Allocate<double>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) dx[i] = dout[i] * factor * in[i] * in[i];
}

void RegisterCube(nabla::Registrar& registrar, const std::string& type, double grad_factor) {
  nabla::GradCheckSpec spec;
  spec.name = "vector";
  nabla::GradCheckInput x;
  x.slot = "X";
  x.shape = {5};
  spec.inputs = {x};
  registrar.Op(type, __FILE__, __LINE__)
      .Doc("Out = X^3 (a test op)")
      .Input("X", "(Tensor) input")
      .Output("Out", "(Tensor) X cubed")
      .InferShape([](nabla::InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::DefaultGradOpDescMaker>()
      .GradCheck(spec);
  registrar.DefaultGradOp(type, __FILE__, __LINE__).InferShape([](nabla::InferShapeContext& c) {
    c.ShareShapeAndDType("X", "X@GRAD");
  });
  registrar.Kernel(type, nabla::DeviceType::kCPU, DType::kFloat64, Cube, __FILE__, __LINE__);
  registrar.Kernel(
      type + "_grad", nabla::DeviceType::kCPU, DType::kFloat64,
      [grad_factor](const ExecutionContext& ctx) { CubeGrad(ctx, grad_factor); }, __FILE__, __LINE__);
}

}  // namespace

NABLA_REGISTER_OPS(acme_cube) { RegisterCube(registrar, "acme_cube", 3.0); }
NABLA_REGISTER_OPS(acme_bad_cube) { RegisterCube(registrar, "acme_bad_cube", 2.7); }

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
