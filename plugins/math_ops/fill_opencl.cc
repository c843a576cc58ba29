// OpenCL kernels of fill_constant and fill_zeros_like, for every dtype:
// clEnqueueFillBuffer with the value's bytes, no OpenCL C.
#include "fill_value.h"
#include "nabla/opencl/kernel.h"
#include "nabla/opkit/attr_tensor.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

template <typename V>
void FillWith(OpenClDevice& dev, Tensor* out, DType dtype, const Shape& shape, V value) {
  void* buf = out->Allocate(dev, dtype, shape);
  dev.Fill(buf, 0, out->Bytes(), &value, sizeof value);
}

void FillTyped(OpenClDevice& dev, Tensor* out, DType dtype, const Shape& shape, const opkit::NumberText& value) {
  switch (dtype) {
    case DType::kFloat32:
      return FillWith(dev, out, dtype, shape, value.As<float>());
    case DType::kFloat64:
      return FillWith(dev, out, dtype, shape, value.As<double>());
    case DType::kInt32:
      return FillWith(dev, out, dtype, shape, value.As<int32_t>());
    case DType::kInt64:
      return FillWith(dev, out, dtype, shape, value.As<int64_t>());
    case DType::kBool:
      return FillWith(dev, out, dtype, shape, static_cast<uint8_t>(value.As<bool>()));
    case DType::kBFloat16:
      return FillWith(dev, out, dtype, shape, FloatToBf16(value.As<float>()));
  }
}

DType DTypeAttr(const ExecutionContext& ctx) {
  DType d;
  const std::string& name = ctx.Attr<std::string>("dtype");
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument, "op '", ctx.Op().Type(),
                "': attribute dtype must be one of float32, float64, int32, int64, bool, but received '", name, "'");
  return d;
}

void FillConstantKernel(const ExecutionContext& ctx) {
  // Shape and value may come from inputs (ShapeTensor, ValueTensor), read
  // back to the host.
  FillTyped(DeviceOf(ctx), ctx.Output("Out"), DTypeAttr(ctx), opkit::CreatedShape(ctx), FillConstantValue(ctx));
}

void FillZerosLikeKernel(const ExecutionContext& ctx) {
  // Only X's shape and dtype are read; its buffer may be gone.
  const Tensor& x = ctx.InputVar("X")->GetTensor();
  FillTyped(DeviceOf(ctx), ctx.Output("Out"), x.GetDType(), x.GetShape(), opkit::NumberText{});
}

}  // namespace

NABLA_REGISTER_OPS(fill_opencl) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool}) {
    registrar.Kernel("fill_constant", DeviceType::kOpenCL, d, FillConstantKernel, __FILE__, __LINE__);
    registrar.Kernel("fill_zeros_like", DeviceType::kOpenCL, d, FillZerosLikeKernel, __FILE__, __LINE__);
  }
}

}  // namespace nabla::math_ops
