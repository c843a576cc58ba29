#pragma once
// Toy ops registered inside the runtime tests: no plugin needed.
#include "nabla/op_registry.h"
#include "nabla/tensor.h"

namespace nabla::testing {

// "toy_add": Out = X + Y (float32/float64), "toy_scale": Out = scale * X.
inline void RegisterToyOps() {
  static bool done = false;
  if (done) return;
  done = true;
  RegisterOps("toy", [](Registrar& r) {
    r.Op("toy_add", __FILE__, __LINE__)
        .Input("X", "x")
        .Input("Y", "y")
        .Output("Out", "x + y")
        .InferShape([](InferShapeContext& c) {
          NABLA_ENFORCE(c.InputShape("X") == c.InputShape("Y"), kInvalidArgument,
                        "toy_add shapes differ: ", ShapeToString(c.InputShape("X")), " vs ",
                        ShapeToString(c.InputShape("Y")));
          c.SetOutputShape("Out", c.InputShape("X"));
          c.SetOutputDType("Out", c.InputDType("X"));
        })
        .GradMaker<DefaultGradOpDescMaker>();
    r.Op("toy_scale", __FILE__, __LINE__)
        .Input("X", "x")
        .Output("Out", "scale * x")
        .Attr<float>("scale", 1.0f, "(float, default 1.0) factor")
        .InferShape([](InferShapeContext& c) {
          c.SetOutputShape("Out", c.InputShape("X"));
          c.SetOutputDType("Out", c.InputDType("X"));
        });
    auto add = [](const ExecutionContext& ctx) {
      const Tensor& x = ctx.Input("X");
      const Tensor& y = ctx.Input("Y");
      Tensor* out = ctx.Output("Out");
      float* o = static_cast<float*>(out->Allocate(ctx.GetDevice()));
      for (int64_t i = 0; i < x.Numel(); ++i) o[i] = x.Data<float>()[i] + y.Data<float>()[i];
    };
    auto scale = [](const ExecutionContext& ctx) {
      const Tensor& x = ctx.Input("X");
      Tensor* out = ctx.Output("Out");
      float* o = static_cast<float*>(out->Allocate(ctx.GetDevice()));
      float s = ctx.Attr<float>("scale");
      for (int64_t i = 0; i < x.Numel(); ++i) o[i] = s * x.Data<float>()[i];
    };
    r.Kernel("toy_add", DeviceType::kCPU, DType::kFloat32, add, __FILE__, __LINE__);
    r.Kernel("toy_scale", DeviceType::kCPU, DType::kFloat32, scale, __FILE__, __LINE__);
  });
}

}  // namespace nabla::testing
