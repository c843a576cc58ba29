// reshape: X with a new shape of the same number of elements.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Paddle's rules: 0 copies X's dim at that position, one -1 is inferred
// from the element count. An unknown X dim copied by a 0 still lets the -1
// be inferred from the dims that are not copied; otherwise it stays -1.
Shape ReshapedShape(const Shape& x, const std::vector<int>& shape, const std::string& where) {
  Shape out(shape.size());
  int infer = -1;
  int64_t given = 1;  // product of the positive dims of `shape`
  for (size_t i = 0; i < shape.size(); ++i) {
    NABLA_ENFORCE(shape[i] >= -1, kInvalidArgument, where, ": attribute shape must hold dims >= -1, but received ",
                  AttrToString(Attribute(shape)));
    if (shape[i] == -1) {
      NABLA_ENFORCE(infer < 0, kInvalidArgument, where, ": attribute shape may hold at most one -1, but received ",
                    AttrToString(Attribute(shape)));
      infer = static_cast<int>(i);
    } else if (shape[i] == 0) {
      NABLA_ENFORCE(i < x.size(), kInvalidArgument, where, ": shape[", i, "] = 0 copies X's dim ", i,
                    ", but X has rank ", x.size(), " (shape ", ShapeToString(x), ")");
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
    NABLA_ENFORCE(rest < 0 || rest % given == 0, kInvalidArgument, where, ": cannot infer the -1 in shape ",
                  AttrToString(Attribute(shape)), " for X of shape ", ShapeToString(x), ": ", rest,
                  " elements do not divide into ", given);
    out[infer] = rest < 0 ? -1 : rest / given;
  } else {
    NABLA_ENFORCE(rest < 0 || rest == given, kInvalidArgument, where, ": expected shape ",
                  AttrToString(Attribute(shape)), " to hold the elements of X (shape ", ShapeToString(x),
                  "): the dims it does not copy from X must hold ", rest, " elements, but received ", given);
  }
  return out;
}

void InferReshapeShape(InferShapeContext& c) {
  c.SetOutputShape("Out", ReshapedShape(c.InputShape("X"), c.Attr<std::vector<int>>("shape"), c.Where()));
  c.SetOutputDType("Out", c.InputDType("X"));
}

void ReshapeKernel(const ExecutionContext& ctx) {
  ViewAs(ctx, "X", "Out",
         ReshapedShape(ctx.Input("X").GetShape(), ctx.Attr<std::vector<int>>("shape"), "op 'reshape'"));
}

NABLA_REGISTER_OPS(reshape) {
  registrar.Op("reshape", __FILE__, __LINE__)
      .Doc("Out = X with the shape given by `shape` (same elements, same order).")
      .Input("X", "(Tensor) the input")
      .Output("Out", "(Tensor) the reshaped tensor")
      .RequiredAttr<std::vector<int>>("shape",
                                      "(ints, required) the new shape: 0 copies X's dim at that position, one -1 "
                                      "is inferred from the element count")
      .InferShape(InferReshapeShape)
      .GradMaker<DefaultGradOpDescMaker>()
      .GradCheck(CheckCase("infer", {CheckInput("X", {2, 3, 4})}, {{"shape", std::vector<int>{0, -1}}}))
      .GradCheck(CheckCase("flatten", {CheckInput("X", {2, 3})}, {{"shape", std::vector<int>{6}}}));
  registrar.DefaultGradOp("reshape", __FILE__, __LINE__).InferShape(InferGradShapes);
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool})
    registrar.Kernel("reshape", DeviceType::kCPU, t, ReshapeKernel, __FILE__, __LINE__);
  for (DType t : {DType::kFloat32, DType::kFloat64})
    registrar.Kernel("reshape_grad", DeviceType::kCPU, t, ViewGradKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
