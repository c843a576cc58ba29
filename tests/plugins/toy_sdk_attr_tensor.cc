// A plugin on the C ABI through the C++ SDK whose op takes tensor-valued
// attributes through the op kit's helpers (nabla/opkit/attr_tensor.h, the
// same code as nabla's tree, over C ABI version 3's *_input_values):
//   toy_fill: Out of shape ShapeTensor / ShapeTensorList / `shape`, every
//   element ValueTensor or `value`; float32.
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
      .InferShape([](nabla::InferShapeContext& c) {
        c.SetOutputShape("Out", CreatedShape(c));
        c.SetOutputDType("Out", nabla::DType::kFloat32);
      });
  // The kernel is picked by the first input's dtype (the C ABI has no
  // KernelDType yet), so it is registered for every dtype an input may have.
  for (const nabla::DType d :
       {nabla::DType::kFloat32, nabla::DType::kFloat64, nabla::DType::kInt32, nabla::DType::kInt64})
    registrar.Kernel(
        "toy_fill", nabla::DeviceType::kCPU, d,
        [](const nabla::ExecutionContext& ctx) {
          const nabla::Shape shape = CreatedShape(ctx);
          const float v = static_cast<float>(*FloatAttrOrTensor(ctx, "ValueTensor", "value"));
          float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), shape);
          for (int64_t i = 0; i < nabla::NumElements(shape); ++i) out[i] = v;
        },
        __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
