// A plugin on the C ABI through the C++ SDK whose kernel throws by its
// `mode` attribute: 1 a nabla::Error, 2 something that is not a
// std::exception, 3 a std::runtime_error. Each must come out of the core as
// one nabla::Error carrying the message, never unwind through C.
#include <stdexcept>

#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_sdk_throw) {
  registrar.Op("toy_sdk_throw", __FILE__, __LINE__)
      .Doc("Out = X, or a throw chosen by mode.")
      .Input("X", "(Tensor) input")
      .Output("Out", "(Tensor) X")
      .Attr<int>("mode", 0, "(int, default 0) 0 copies, 1-3 throw")
      .InferShape([](nabla::InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
  registrar.Kernel(
      "toy_sdk_throw", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const int mode = ctx.Attr<int>("mode");
        NABLA_ENFORCE(mode != 1, kOutOfRange, "toy_sdk_throw: mode 1 is out of range");
        if (mode == 2) throw 42;
        if (mode == 3) throw std::runtime_error("toy_sdk_throw: a runtime_error");
        const nabla::Tensor& x = ctx.Input("X");
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        const float* px = x.Data<float>();
        for (int64_t i = 0; i < x.Numel(); ++i) out[i] = px[i];
      },
      __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
