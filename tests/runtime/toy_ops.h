#pragma once
// Toy ops registered inside the runtime tests: no plugin needed.
#include "nabla/op_registry.h"
#include "nabla/tensor.h"

namespace nabla::testing {

// "toy_add": Out = X + Y (float32/float64), "toy_scale": Out = scale * X,
// "toy_tile": Out = X repeated `times` times (its shape follows an attr).
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
    r.Op("toy_tile", __FILE__, __LINE__)
        .Input("X", "x")
        .Output("Out", "x, times times over")
        .Attr<int>("times", 1, "(int, default 1) copies")
        .InferShape([](InferShapeContext& c) {
          c.SetOutputShape("Out", {NumElements(c.InputShape("X")) * c.Attr<int>("times")});
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
    auto tile = [](const ExecutionContext& ctx) {
      const Tensor& x = ctx.Input("X");
      float* o = static_cast<float*>(ctx.Output("Out")->Allocate(ctx.GetDevice()));
      for (int t = 0; t < ctx.Attr<int>("times"); ++t)
        for (int64_t i = 0; i < x.Numel(); ++i) *o++ = x.Data<float>()[i];
    };
    r.Kernel("toy_add", DeviceType::kCPU, DType::kFloat32, add, __FILE__, __LINE__);
    r.Kernel("toy_tile", DeviceType::kCPU, DType::kFloat32, tile, __FILE__, __LINE__);
    r.Kernel("toy_scale", DeviceType::kCPU, DType::kFloat32, scale, __FILE__, __LINE__);
  });
}

}  // namespace nabla::testing
