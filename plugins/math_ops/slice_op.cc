// slice: the box of Input between `starts` and `ends` along `axes`, with
// Python's clamping, then the `decrease_axis` dims removed. The gradient
// writes Out@GRAD into that box of a zero Input@GRAD.
#include "math_util.h"
#include "nabla/plugin.h"
#include "slice_box.h"

namespace nabla::math_ops {
namespace {

void InferSliceShape(InferShapeContext& c) {
  c.SetOutputShape("Out", MakeSliceBox(c.InputShape("Input"), c.Op(), ReadBounds(c), c.Where()).out);
  c.SetOutputDType("Out", c.InputDType("Input"));
}

// Calls f(offset into Input, offset into the box) for the first element of
// every innermost row of the box; rows are box.back() elements long.
template <typename F>
void ForEachBoxRow(const Shape& in, const SliceBox& b, F&& f) {
  const size_t rank = in.size();
  if (NumElements(b.box) == 0) return;
  std::vector<int64_t> stride(rank, 1);
  for (size_t k = rank; k-- > 1;) stride[k - 1] = stride[k] * in[k];
  int64_t base = 0;
  for (size_t k = 0; k < rank; ++k) base += b.begin[k] * stride[k];
  std::vector<int64_t> idx(rank, 0);
  const int64_t row = b.box[rank - 1];
  const int64_t rows = NumElements(b.box) / row;
  int64_t in_off = base;
  for (int64_t r = 0; r < rows; ++r) {
    f(in_off, r * row);
    for (size_t k = rank - 1; k-- > 0;) {
      in_off += stride[k];
      if (++idx[k] < b.box[k]) break;
      in_off -= stride[k] * b.box[k];
      idx[k] = 0;
    }
  }
}

template <typename T>
struct SliceKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& in = ctx.Input("Input");
    SliceBox b = MakeSliceBox(in.GetShape(), ctx.Op(), ReadBounds(ctx), "op 'slice'");
    const T* src = in.Data<T>();
    T* dst = AllocOutput<T>(ctx, ctx.Output("Out"), b.out);
    const int64_t row = b.box.back();
    ForEachBoxRow(in.GetShape(), b, [&](int64_t i, int64_t o) { std::copy(src + i, src + i + row, dst + o); });
  }
};

template <typename T>
struct SliceGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* din = ctx.Output("Input@GRAD");
    if (!din) return;
    const Shape& in = ctx.Input("Input").GetShape();
    const Tensor& dout = ctx.Input("Out@GRAD");
    SliceBox b = MakeSliceBox(in, ctx.Op(), ReadBounds(ctx), "op 'slice_grad'");
    NABLA_ENFORCE(dout.Numel() == NumElements(b.box), kInvalidArgument, "op 'slice_grad': expected Out@GRAD of shape ",
                  ShapeToString(b.out), ", but received ", ShapeToString(dout.GetShape()));
    const T* src = dout.Data<T>();
    T* dst = AllocOutput<T>(ctx, din, in);
    std::fill(dst, dst + NumElements(in), T(0));
    const int64_t row = b.box.back();
    ForEachBoxRow(in, b, [&](int64_t i, int64_t o) { std::copy(src + o, src + o + row, dst + i); });
  }
};

NABLA_REGISTER_OPS(slice) {
  registrar.Op("slice", __FILE__, __LINE__)
      .Doc(
          "Out = Input[starts:ends] along each of `axes` (step 1), bounds clamped as Python slices: negative "
          "bounds count from the end, out-of-range bounds clamp to [0, dim], and an end before the start gives an "
          "empty dim. Dims listed in decrease_axis (each of size 1 after slicing) are then removed.")
      .Input("Input", "(Tensor) the tensor to slice")
      .Input("StartsTensor",
             "(Tensor<int32|int64>, optional) 1-D: starts at run time; before StartsTensorList and attribute starts; "
             "no gradient",
             kTensorAttrInput)
      .Input("EndsTensor",
             "(Tensor<int32|int64>, optional) 1-D: ends at run time; before EndsTensorList and attribute ends; no "
             "gradient",
             kTensorAttrInput)
      .Input("StartsTensorList",
             "(Tensors<int32|int64>, optional) one single-element tensor per axis: starts at run time; before "
             "attribute starts; no gradient",
             kTensorAttrListInput)
      .Input("EndsTensorList",
             "(Tensors<int32|int64>, optional) one single-element tensor per axis: ends at run time; before "
             "attribute ends; no gradient",
             kTensorAttrListInput)
      .Output("Out", "(Tensor) the slice")
      .RequiredAttr<std::vector<int>>("axes", "(ints, required) the dims to slice; negative dims count from the end")
      .Attr<std::vector<int>>("starts", {},
                              "(ints, default []) the first index along each of axes, unless StartsTensor or "
                              "StartsTensorList gives them")
      .Attr<std::vector<int>>("ends", {},
                              "(ints, default []) one past the last index along each of axes, unless EndsTensor or "
                              "EndsTensorList gives them")
      .Attr<std::vector<int>>("decrease_axis", {},
                              "(ints, default []) sliced dims of size 1 to remove from Out; removing every dim "
                              "gives shape [1]")
      .InferShape(InferSliceShape)
      .GradMaker<GradFromInputsMaker>()
      .GradCheck(CheckCase(
          "two_axes", {CheckInput("Input", {3, 4, 5})},
          {{"axes", std::vector<int>{0, 2}}, {"starts", std::vector<int>{1, -4}}, {"ends", std::vector<int>{100, -1}}}))
      .GradCheck(CheckCase("decrease", {CheckInput("Input", {3, 4})},
                           {{"axes", std::vector<int>{1}},
                            {"starts", std::vector<int>{-1}},
                            {"ends", std::vector<int>{4}},
                            {"decrease_axis", std::vector<int>{1}}}));
  registrar.DefaultGradOp("slice", __FILE__, __LINE__).InferShape(InferGradShapes);
  RegisterCpuKernels<SliceKernel, float, double, int32_t, int64_t>(registrar, "slice", __FILE__, __LINE__);
  RegisterCpuKernels<SliceGradKernel, float, double>(registrar, "slice_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
