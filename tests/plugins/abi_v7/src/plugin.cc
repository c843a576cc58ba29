// The op plugin frozen at version 7 of nabla's C ABI (tests/plugins/abi_v7):
// what version 7 added, each used at least once.
//   abi_v7_affine: Out[i] = sign * (X[i] * scale + shift + offsets[i % n])
//     with sign = -1 when `negate`, the attributes read on every call
//     through kernel_attr (ExecutionContext::Attr: float, int, bool, string,
//     float list, int list) and, for `scale`, also through the SDK's copy of
//     the op (ExecutionContext::Op, kept by op_version): the two must agree,
//     so a copy kept past a change of the op is an error, not a wrong value.
//     `dims` (int list) must equal X's shape when it is not empty. `probe`
//     (string) asks the kernel to read an attribute the op lacks ("missing")
//     or one as the wrong type ("wrong_type"), whose errors must name them.
// Never edit this file (README.md).
#include <cstdint>
#include <string>
#include <vector>

#include "nabla/plugin.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;
using nabla::Tensor;

template <typename T>
void AffineKernel(const ExecutionContext& ctx) {
  const float scale = ctx.Attr<float>("scale");
  const int shift = ctx.Attr<int>("shift");
  const bool negate = ctx.Attr<bool>("negate");
  const std::string probe = ctx.Attr<std::string>("probe");
  const std::vector<float> offsets = ctx.Attr<std::vector<float>>("offsets");
  const std::vector<int> dims = ctx.Attr<std::vector<int>>("dims");
  if (probe == "missing") (void)ctx.Attr<int>("no_such_attr");
  if (probe == "wrong_type") (void)ctx.Attr<int>("scale");
  const nabla::OpDesc& op = ctx.Op();
  NABLA_ENFORCE(op.Type() == "abi_v7_affine", kRuntime, "abi_v7_affine: its copy is of op '", op.Type(), "'");
  NABLA_ENFORCE(op.Attr<float>("scale") == scale, kRuntime, "abi_v7_affine: its copy of the op has scale ",
                op.Attr<float>("scale"), " but the op has ", scale);
  const Tensor& x = ctx.Input("X");
  if (!dims.empty()) {
    const nabla::Shape shape = x.GetShape();
    NABLA_ENFORCE(std::vector<int64_t>(dims.begin(), dims.end()) == std::vector<int64_t>(shape.begin(), shape.end()),
                  kInvalidArgument, "abi_v7_affine: X's shape is not `dims`");
  }
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const T* in = x.Data<T>();
  const double sign = negate ? -1.0 : 1.0;
  for (int64_t i = 0; i < x.Numel(); ++i) {
    const double off = offsets.empty() ? 0.0 : offsets[static_cast<size_t>(i) % offsets.size()];
    out[i] = static_cast<T>(sign * (static_cast<double>(in[i]) * scale + shift + off));
  }
}

}  // namespace

NABLA_REGISTER_OPS(abi_v7_ops) {
  registrar.Op("abi_v7_affine", __FILE__, __LINE__)
      .Doc("Out = sign * (X * scale + shift + offsets[i % n]), sign = -1 when negate.")
      .Input("X", "(Tensor)")
      .Output("Out", "(Tensor) X's shape")
      .Attr<float>("scale", 1.0f, "(float)")
      .Attr<int>("shift", 0, "(int)")
      .Attr<bool>("negate", false, "(bool)")
      .Attr<std::string>("probe", "", "(string) \"missing\" or \"wrong_type\": read an attribute badly")
      .Attr<std::vector<float>>("offsets", {}, "(float list) added by position, cyclically")
      .Attr<std::vector<int>>("dims", {}, "(int list) X's shape, when given")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v7_affine", nabla::DeviceType::kCPU, DType::kFloat32, AffineKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("abi_v7_affine", nabla::DeviceType::kCPU, DType::kFloat64, AffineKernel<double>, __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
