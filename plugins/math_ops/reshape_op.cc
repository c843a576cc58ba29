// reshape: X with a new shape of the same number of elements.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Paddle's rules: 0 copies X's dim at that position, one -1 is inferred
// from the element count. An unknown X dim copied by a 0 still lets the -1
// be inferred from the dims that are not copied; otherwise it stays -1.
// `source` names where `shape` came from (attribute shape, input Shape).
Shape ReshapedShape(const Shape& x, const std::vector<int64_t>& shape, const std::string& source, ErrorKind kind,
                    const std::string& where) {
  // `kind`: kRuntime for a shape a tensor held at run time (AttrValue::BadValueKind).
  auto enforce = [&](bool ok, const auto&... parts) {
    if (!ok) ThrowError(kind, StrCat(parts...));
  };
  const std::string given_str = ValuesToString(shape);
  enforce(!shape.empty(), where, ": ", source,
          " must hold at least one dim (or give input Shape or ShapeTensor), but received []");
  Shape out(shape.size());
  int infer = -1;
  int64_t given = 1;  // product of the positive dims of `shape`
  for (size_t i = 0; i < shape.size(); ++i) {
    enforce(shape[i] >= -1, where, ": ", source, " must hold dims >= -1, but received ", given_str);
    if (shape[i] == -1) {
      enforce(infer < 0, where, ": ", source, " may hold at most one -1, but received ", given_str);
      infer = static_cast<int>(i);
    } else if (shape[i] == 0) {
      enforce(i < x.size(), where, ": ", source, "[", i, "] = 0 copies X's dim ", i, ", but X has rank ", x.size(),
              " (shape ", ShapeToString(x), ")");
      out[i] = x[i];
    } else {
      out[i] = shape[i];
      given *= shape[i];
    }
  }
  // The elements of X outside the copied dims; -1 when unknown.
  int64_t rest = 1;
  for (size_t i = 0; i < x.size() && rest >= 0; ++i) {
    if (i < shape.size() && shape[i] == 0) continue;
    rest = x[i] < 0 ? -1 : rest * x[i];
  }
  if (infer >= 0) {
    enforce(rest < 0 || rest % given == 0, where, ": cannot infer the -1 in ", source, " ", given_str,
            " for X of shape ", ShapeToString(x), ": ", rest, " elements do not divide into ", given);
    out[infer] = rest < 0 ? -1 : rest / given;
  } else {
    enforce(rest < 0 || rest == given, where, ": expected ", source, " ", given_str,
            " to hold the elements of X (shape ", ShapeToString(x), "): the dims it does not copy from X must hold ",
            rest, " elements, but received ", given);
  }
  return out;
}

// Paddle's precedence: ShapeTensor (a list of one-element tensors), then
// Shape (one 1-D tensor), then attribute shape.
AttrValue<std::vector<int64_t>> TargetShape(const InferShapeContext& c) {
  return IntListAttrOrTensor(c, "Shape", "ShapeTensor", "shape", ListOrder::kListFirst);
}

void InferReshapeShape(InferShapeContext& c) {
  const auto target = TargetShape(c);
  if (target.Known()) {
    c.SetOutputShape("Out", ReshapedShape(c.InputShape("X"), *target, target.source, target.BadValueKind(), c.Where()));
  } else {
    // Build time, the shape comes from an input: its rank at most.
    c.SetOutputShape("Out", Shape(std::max<int64_t>(target.size, 0), -1));
  }
  c.SetOutputDType("Out", c.InputDType("X"));
}

void ReshapeKernel(const ExecutionContext& ctx) {
  const auto target = IntListAttrOrTensor(ctx, "Shape", "ShapeTensor", "shape", ListOrder::kListFirst);
  ViewAs(ctx, "X", "Out",
         ReshapedShape(ctx.Input("X").GetShape(), *target, target.source, target.BadValueKind(), "op 'reshape'"));
}

// bfloat16 X (mixed precision: a narrowing cast moved before the reshape,
// ElideBf16Casts): the gradient a GEMM's grad op wrote in float32 (its
// fold, FoldBf16Casts) is rounded here, as the cast's gradient rounded it
// before; a bfloat16 one is viewed as the float32 kernel views.
void ReshapeGradBf16Kernel(const ExecutionContext& ctx) {
  const Tensor& dout = ctx.Input("Out@GRAD");
  Tensor* dx = ctx.Output("X@GRAD");
  if (!dx || dout.GetDType() != DType::kFloat32) return ViewGradKernel(ctx);
  const Tensor& x = ctx.Input("X");
  NABLA_ENFORCE(dout.Numel() == x.Numel(), kInvalidArgument, "op 'reshape_grad': expected Out@GRAD with ", x.Numel(),
                " elements (X shape ", ShapeToString(x.GetShape()), "), but received shape ",
                ShapeToString(dout.GetShape()));
  cpu::ConvertToBf16(dout.Data<float>(), AllocOutput<bfloat16>(ctx, dx, x.GetShape()), x.Numel());
}

NABLA_REGISTER_OPS(reshape) {
  registrar.Op("reshape", __FILE__, __LINE__)
      .Doc("Out = X with the shape given by `shape` (same elements, same order).")
      .Input("X", "(Tensor) the input")
      .Input("Shape",
             "(Tensor<int32|int64>, optional) 1-D: the new shape at run time; before attribute shape, after "
             "ShapeTensor; no gradient",
             kTensorAttrInput)
      .Input("ShapeTensor",
             "(Tensors<int32|int64>, optional) one single-element tensor per dim: the new shape at run time; before "
             "Shape and attribute shape; no gradient",
             kTensorAttrListInput)
      .Output("Out", "(Tensor) the reshaped tensor")
      .Attr<std::vector<int>>("shape", {},
                              "(ints, default []) the new shape: 0 copies X's dim at that position, one -1 is "
                              "inferred from the element count; needed unless Shape or ShapeTensor is given")
      .InferShape(InferReshapeShape)
      .MovesData()
      .GradMaker<DefaultGradOpDescMaker>()
      .GradCheck(CheckCase("infer", {CheckInput("X", {2, 3, 4})}, {{"shape", std::vector<int>{0, -1}}}))
      .GradCheck(CheckCase("flatten", {CheckInput("X", {2, 3})}, {{"shape", std::vector<int>{6}}}));
  registrar.DefaultGradOp("reshape", __FILE__, __LINE__).InferShape(InferGradShapes).Bf16TakesFloat32({"Out@GRAD"});
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool, DType::kBFloat16})
    registrar.Kernel("reshape", DeviceType::kCPU, t, ReshapeKernel, __FILE__, __LINE__);
  for (DType t : {DType::kFloat32, DType::kFloat64})
    registrar.Kernel("reshape_grad", DeviceType::kCPU, t, ViewGradKernel, __FILE__, __LINE__);
  // A view moves no data, so the same kernels serve every device: on OpenCL
  // Out shares X's device buffer, where a CPU fallback would copy X to the
  // host and back (a transformer reshapes q, k, v and the attention's output
  // every step).
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool})
    registrar.Kernel("reshape", DeviceType::kOpenCL, t, ReshapeKernel, __FILE__, __LINE__);
  for (DType t : {DType::kFloat32, DType::kFloat64})
    registrar.Kernel("reshape_grad", DeviceType::kOpenCL, t, ViewGradKernel, __FILE__, __LINE__);
  registrar.Kernel("reshape_grad", DeviceType::kCPU, DType::kBFloat16, ReshapeGradBf16Kernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
