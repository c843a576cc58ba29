// A plugin on the C ABI through the C++ SDK with what C ABI version 3 adds
// for op registration:
//   toy_fill: Out of shape ShapeTensor / ShapeTensorList / `shape`, every
//     element ValueTensor or `value`, float32: tensor-valued attributes
//     through the op kit's helpers (nabla/opkit/attr_tensor.h, the same code
//     as nabla's tree), and a kernel dtype that is not its first input's;
//   toy_split: X cut along dim 0 into `num` equal parts, Out's var count
//     declared from `num` (OutputCount).
#include "nabla/opkit/attr_tensor.h"
#include "nabla/plugin.h"

using nabla::opkit::CreatedShape;
using nabla::opkit::FloatAttrOrTensor;
using nabla::opkit::kTensorAttrInput;
using nabla::opkit::kTensorAttrListInput;

NABLA_REGISTER_OPS(toy_sdk_attr_tensor) {
  registrar.Op("toy_fill", __FILE__, __LINE__)
      .Doc("Out = a tensor of the given shape, every element the given value.")
      .Input("ShapeTensor", "(Tensor, optional) the shape, 1-D int32/int64", kTensorAttrInput)
      .Input("ShapeTensorList", "(Tensors, optional) the shape, one element each", kTensorAttrListInput)
      .Input("ValueTensor", "(Tensor, optional) the value, one float32/float64 element", kTensorAttrInput)
      .Output("Out", "(Tensor) float32")
      .Attr<std::vector<int>>("shape", {}, "(list of int) the shape without ShapeTensor(List)")
      .Attr<float>("value", 0.0f, "(float) the value without ValueTensor")
      .KernelDType([](const nabla::ExecutionContext&) { return nabla::DType::kFloat32; })
      .InferShape([](nabla::InferShapeContext& c) {
        c.SetOutputShape("Out", CreatedShape(c));
        c.SetOutputDType("Out", nabla::DType::kFloat32);
      });
  registrar.Kernel(
      "toy_fill", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const nabla::Shape shape = CreatedShape(ctx);
        const float v = static_cast<float>(*FloatAttrOrTensor(ctx, "ValueTensor", "value"));
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), shape);
        for (int64_t i = 0; i < nabla::NumElements(shape); ++i) out[i] = v;
      },
      __FILE__, __LINE__);

  registrar.Op("toy_split", __FILE__, __LINE__)
      .Doc("Out[i] = the i-th of `num` equal parts of X along dim 0.")
      .Input("X", "(Tensor) float32, dim 0 a multiple of num")
      .Output("Out", "(Tensors) the parts", nabla::kDuplicable)
      .Attr<int>("num", 1, "(int) how many parts")
      .OutputCount("Out", [](const nabla::OpDesc& op) { return op.Attr<int>("num"); })
      .InferShape([](nabla::InferShapeContext& c) {
        nabla::Shape s = c.InputShape("X");
        const int num = c.Attr<int>("num");
        NABLA_ENFORCE(num >= 1 && static_cast<int>(c.OutputSize("Out")) == num, kInvalidArgument, c.Where(),
                      ": expected num (", num, ") outputs, but received ", c.OutputSize("Out"));
        if (s[0] >= 0) s[0] /= num;
        for (int i = 0; i < num; ++i) c.ShareShapeAndDType("X", "Out", i), c.SetOutputShape("Out", s, i);
      });
  registrar.Kernel(
      "toy_split", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const nabla::Tensor& x = ctx.Input("X");
        const int num = ctx.Attr<int>("num");
        nabla::Shape part = x.GetShape();
        part[0] /= num;
        const int64_t n = nabla::NumElements(part);
        for (int i = 0; i < num; ++i) {
          float* out = ctx.Output("Out", i)->Allocate<float>(ctx.GetDevice(), part);
          for (int64_t j = 0; j < n; ++j) out[j] = x.Data<float>()[i * n + j];
        }
      },
      __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
