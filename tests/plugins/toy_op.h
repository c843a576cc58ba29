#pragma once
// The toy op the good plugin, its copy and the duplicate-op plugin register:
// Out = 2 * X, float32 on the CPU.
#include "nabla/op_registry.h"
#include "nabla/tensor.h"

namespace toy {

inline void RegisterToyDouble(nabla::Registrar& registrar, const char* file, int line) {
  registrar.Op("toy_double", file, line)
      .Doc("Out = 2 * X (a test op)")
      .Input("X", "(Tensor) input")
      .Output("Out", "(Tensor) output, shape of X")
      .InferShape([](nabla::InferShapeContext& c) {
        c.SetOutputShape("Out", c.InputShape("X"));
        c.SetOutputDType("Out", c.InputDType("X"));
      });
  registrar.Kernel(
      "toy_double", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const nabla::Tensor& x = ctx.Input("X");
        nabla::Tensor* out = ctx.Output("Out");
        const float* in = x.Data<float>();
        float* o = out->Allocate<float>(ctx.GetDevice(), x.GetShape());
        for (int64_t i = 0; i < x.Numel(); ++i) o[i] = 2.0f * in[i];
      },
      file, line);
}

}  // namespace toy
