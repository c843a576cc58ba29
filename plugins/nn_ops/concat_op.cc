// concat: joins the tensors of X along `axis`. Its gradient slices Out@GRAD
// back into pieces shaped like each X (concat_grad reads X's shapes only).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "nabla/plugin.h"
#include "nabla/scope.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void ConcatKernel(const ExecutionContext& ctx) {
  std::vector<const Tensor*> xs = ctx.MultiInput("X");
  Tensor* out = ctx.Output("Out");
  const int axis = AxisAttrOrTensor(ctx, "AxisTensor", "axis", xs[0]->Rank());
  T* po = out->Allocate<T>(ctx.GetDevice(), out->GetShape());
  const AxisView ov = ViewAround(out->GetShape(), axis);
  int64_t offset = 0;  // along the axis, in elements of one outer slice
  for (const Tensor* x : xs) {
    const AxisView v = ViewAround(x->GetShape(), axis);
    const int64_t chunk = v.dim * v.inner;
    const T* px = x->Data<T>();
    CopyPartToWhole(px, v.outer, ov.dim * ov.inner, offset, chunk, po);
    offset += chunk;
  }
}

template <typename T>
void ConcatGradKernel(const ExecutionContext& ctx) {
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  std::vector<Tensor*> dxs = ctx.MultiOutput(GradVarName("X"));
  const size_t n = ctx.InputSize("X");
  const int axis = AxisAttrOrTensor(ctx, "AxisTensor", "axis", dout.Rank());
  const AxisView ov = ViewAround(dout.GetShape(), axis);
  const T* pd = dout.Data<T>();
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const Shape& shape = ctx.InputVar("X", i)->GetTensor().GetShape();
    const AxisView v = ViewAround(shape, axis);
    const int64_t chunk = v.dim * v.inner;
    if (i < dxs.size() && dxs[i]) {
      CopyPartFromWhole(pd, v.outer, ov.dim * ov.inner, offset, chunk, dxs[i]->Allocate<T>(ctx.GetDevice(), shape));
    }
    offset += chunk;
  }
}

void InferConcat(InferShapeContext& c) {
  const size_t n = c.InputSize("X");
  NABLA_ENFORCE(n >= 1, kInvalidArgument, c.Where(), ": X must name at least one tensor, but received none");
  Shape out = c.InputShape("X", 0);
  const DType dtype = c.InputDType("X", 0);
  const std::optional<int> known_axis = AxisAttrOrTensor(c, "AxisTensor", "axis", out.size());
  if (!known_axis) {
    // Build time, the axis comes from an input: any dim may be the joined one.
    c.SetOutputShape("Out", Shape(out.size(), -1));
    c.SetOutputDType("Out", dtype);
    return;
  }
  const int axis = *known_axis;
  for (size_t i = 1; i < n; ++i) {
    const Shape s = c.InputShape("X", i);
    NABLA_ENFORCE(c.InputDType("X", i) == dtype, kInvalidArgument, c.Where(), ": every X must have dtype ",
                  DTypeName(dtype), ", but X[", i, "] is ", DTypeName(c.InputDType("X", i)));
    NABLA_ENFORCE(s.size() == out.size(), kInvalidArgument, c.Where(), ": every X must have rank ", out.size(),
                  ", but X[", i, "] has shape ", ShapeToString(s));
    for (size_t d = 0; d < s.size(); ++d) {
      if (static_cast<int>(d) == axis) {
        out[d] = (out[d] < 0 || s[d] < 0) ? -1 : out[d] + s[d];
        continue;
      }
      NABLA_ENFORCE(DimsCompatible(out[d], s[d]), kInvalidArgument, c.Where(), ": X must agree on every dim but axis ",
                    axis, ", but X[0] has shape ", ShapeToString(c.InputShape("X", 0)), " and X[", i, "] has shape ",
                    ShapeToString(s));
      if (out[d] < 0) out[d] = s[d];
    }
  }
  c.SetOutputShape("Out", out);
  c.SetOutputDType("Out", dtype);
}

class ConcatGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    // Integer and bool X get no gradient (the backward builder's no-grad
    // set holds them): no grad op where no X@GRAD is wanted.
    std::vector<std::string> dx = InputGrad("X");
    if (std::none_of(dx.begin(), dx.end(), [](const std::string& n) { return n != kEmptyVarName; })) return {};
    VarNameMap inputs{{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}};
    if (ForwardOp().HasInput("AxisTensor")) inputs["AxisTensor"] = Input("AxisTensor");
    return OneOp("concat_grad", std::move(inputs), {{GradVarName("X"), std::move(dx)}}, Attrs());
  }
};

}  // namespace

NABLA_REGISTER_OPS(concat) {
  GradCheckSpec axis1;
  axis1.name = "three_inputs_axis1";
  axis1.inputs = {CheckInput("X", {2, 3, 2})};
  axis1.inputs[0].count = 3;
  axis1.outputs = {{"Out", 1}};
  axis1.attrs = {{"axis", 1}};
  GradCheckSpec neg;
  neg.name = "two_inputs_last_axis";
  neg.inputs = {CheckInput("X", {3, 2})};
  neg.inputs[0].count = 2;
  neg.outputs = {{"Out", 1}};
  neg.attrs = {{"axis", -1}};
  registrar.Op("concat", __FILE__, __LINE__)
      .Doc(
          "Concatenates the tensors of X along `axis`; they must agree on every other dim. Any dtype; only float "
          "X get a gradient.")
      .Input("X", "(Tensor[]) the tensors to join, same rank and dtype", kDuplicable)
      .Input("AxisTensor",
             "(Tensor<int32|int64>, optional) one element: the axis at run time; before attribute axis; no gradient",
             kTensorAttrInput)
      .Output("Out", "(Tensor) the joined tensor")
      .Attr<int>("axis", 0, "(int, default 0) the axis to join along; negative counts from the end")
      .InferShape(InferConcat)
      .GradMaker<ConcatGradMaker>()
      .GradCheck(axis1)
      .GradCheck(neg);
  OpBuilder& grad = registrar.DefaultGradOp("concat", __FILE__, __LINE__);
  grad.Doc("Gradient of concat: slices Out@GRAD into pieces shaped like each X.")
      .InferShape([](InferShapeContext& c) {
        for (size_t i = 0; i < c.OutputSize(GradVarName("X")); ++i) c.ShareShapeAndDType("X", GradVarName("X"), i, i);
      })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  grad.NoBufferInput("X");
  // Pure copies, so every dtype (Paddle registers ints and bool too); the
  // gradient is float only.
  RegisterFloatKernels(registrar, "concat", ConcatKernel<float>, ConcatKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("concat", DeviceType::kCPU, DType::kInt32, ConcatKernel<int32_t>, __FILE__, __LINE__);
  registrar.Kernel("concat", DeviceType::kCPU, DType::kInt64, ConcatKernel<int64_t>, __FILE__, __LINE__);
  registrar.Kernel("concat", DeviceType::kCPU, DType::kBool, ConcatKernel<bool>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "concat_grad", ConcatGradKernel<float>, ConcatGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
