// An op plugin that carries a kernel for another plugin's device: its op
// toy_triple (Out = 3 X) has a CPU kernel and one for the device type
// "skeleton", looked up by name whether or not the skeleton device plugin
// has loaded yet.
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

}  // namespace

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
