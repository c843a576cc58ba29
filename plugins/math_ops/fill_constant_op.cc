// fill_constant: a tensor of attribute shape and dtype holding one value
// (seeds the backward pass with loss@GRAD = 1).
#include "fill_value.h"
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

template <typename T>
struct FillConstantKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* out = ctx.Output("Out");
    T* o = AllocOutput<T>(ctx, out, CreatedShape(ctx));
    std::fill(o, o + out->Numel(), FillConstantValue(ctx).As<T>());
  }
};

NABLA_REGISTER_OPS(fill_constant) {
  registrar.Op("fill_constant", __FILE__, __LINE__)
      .Doc("Out = a tensor of attribute shape and dtype with every element equal to value.")
      .Input("ShapeTensor",
             "(Tensor<int32|int64>, optional) 1-D: Out's shape at run time; before ShapeTensorList and attribute "
             "shape; no gradient",
             kTensorAttrInput)
      .Input("ShapeTensorList",
             "(Tensors<int32|int64>, optional) one single-element tensor per dim: Out's shape at run time; before "
             "attribute shape; no gradient",
             kTensorAttrListInput)
      .Input("ValueTensor",
             "(Tensor<float32|float64|int32|int64|bool>, optional) one element: the value at run time, an integer "
             "exactly; before attributes str_value and value; no gradient",
             kTensorAttrInput)
      .Output("Out", "(Tensor) the filled tensor")
      .Attr<std::vector<int>>("shape", {}, "(ints, default []) the shape of Out", CheckShapeAttr)
      .Attr<float>("value", 0.0f, "(float, default 0.0) the value of every element (to bool: value != 0)")
      .Attr<std::string>("str_value", "",
                         "(string, default \"\") the value as text, before attribute value: exact where the float "
                         "value is not (an int64 such as 123456789, a float64 such as 0.1); an integer, a decimal "
                         "or exponent form, inf, -inf or nan",
                         CheckStrValue)
      .Attr<std::string>("dtype", "float32",
                         "(string, default \"float32\") Out's dtype: float32, float64, int32, int64, bool",
                         CheckDTypeName)
      .InferShape(InferFromShapeAndDTypeAttrs)
      .KernelDType(KernelDTypeFromAttr)
      .GradMaker<EmptyGradOpDescMaker>();
  RegisterCpuKernels<FillConstantKernel, float, double, int32_t, int64_t, bool>(registrar, "fill_constant", __FILE__,
                                                                                __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
