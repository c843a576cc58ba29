// An op plugin that carries a kernel for another plugin's device: its op
// toy_triple (Out = 3 X) has a CPU kernel and one for the device type
// "skeleton", looked up by name whether or not the skeleton device plugin
// has loaded yet. Its op toy_copy (Out = a copy of X) copies with
// Tensor::CopyFrom (C ABI version 4's tensor_copy) on either device.
#include <cstring>

#include "nabla/plugin.h"

NABLA_PLUGIN(NABLA_PLUGIN_NAME);

namespace {

template <bool kOnSkeleton>
void Triple(const nabla::ExecutionContext& ctx) {
  // The executor picked this kernel for the device it runs on.
  NABLA_ENFORCE((ctx.GetDevice().Type() == nabla::RegisterDeviceType("skeleton")) == kOnSkeleton, kRuntime,
                "toy_triple: the ", kOnSkeleton ? "skeleton" : "cpu", " kernel ran on device type ",
                nabla::DeviceTypeName(ctx.GetDevice().Type()));
  // The skeleton's device object belongs to the skeleton plugin: not ours to use.
  NABLA_ENFORCE(ctx.GetDevice().As<nabla::BackendDevice>() == nullptr, kRuntime,
                "toy_triple: Device::As gave another plugin's device object");
  const nabla::Tensor& x = ctx.Input("X");
  const float* px = x.Data<float>();
  float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) out[i] = 3 * px[i];
}

void Copy(const nabla::ExecutionContext& ctx) {
  const nabla::Tensor& x = ctx.Input("X");
  // The var's tensor is the input's own, data and all.
  NABLA_ENFORCE(&ctx.InputVar("X")->GetTensor() == &x, kRuntime, "toy_copy: InputVar gave another tensor");
  nabla::Tensor* out = ctx.Output("Out");
  out->CopyFrom(x, ctx.GetDevice());
  NABLA_ENFORCE(x.Numel() == 0 || out->Data<float>() != x.Data<float>(), kRuntime,
                "toy_copy: the copy shares X's storage");
  // A bad argument is an error naming the function, never a crash.
  const nabla_api& api = nabla::Api();
  NABLA_ENFORCE(api.tensor_copy(nullptr, x.Handle(), ctx.GetDevice().Handle()) == NABLA_C_ERROR &&
                    std::strstr(api.last_error(nullptr), "tensor_copy: received NULL") != nullptr,
                kRuntime, "toy_copy: tensor_copy accepted NULL");
}

}  // namespace

NABLA_REGISTER_OPS(toy_copy) {
  registrar.Op("toy_copy", __FILE__, __LINE__)
      .Doc("Out = a copy of X, on the CPU or the skeleton device.")
      .Input("X", "(Tensor<float32>) input")
      .Output("Out", "(Tensor<float32>) the copy")
      .InferShape([](nabla::InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("toy_copy", nabla::DeviceType::kCPU, nabla::DType::kFloat32, Copy, __FILE__, __LINE__);
  registrar.Kernel("toy_copy", nabla::RegisterDeviceType("skeleton"), nabla::DType::kFloat32, Copy, __FILE__, __LINE__);
}

NABLA_REGISTER_OPS(toy_triple) {
  registrar.Op("toy_triple", __FILE__, __LINE__)
      .Doc("Out = 3 X, with a kernel on the skeleton device.")
      .Input("X", "(Tensor<float32>) input")
      .Output("Out", "(Tensor<float32>) 3 X")
      .InferShape([](nabla::InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("toy_triple", nabla::DeviceType::kCPU, nabla::DType::kFloat32, Triple<false>, __FILE__, __LINE__);
  registrar.Kernel("toy_triple", nabla::RegisterDeviceType("skeleton"), nabla::DType::kFloat32, Triple<true>, __FILE__,
                   __LINE__);
}
