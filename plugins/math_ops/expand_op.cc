// expand: X tiled expand_times[i] times along each dim i (Paddle's legacy
// expand, PyTorch's Tensor.repeat). The gradient sums Out@GRAD over the
// tiles.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Paddle's precedence: ExpandTimes (1-D), then expand_times_tensor (one
// single-element tensor per dim), then attribute expand_times.
template <typename Ctx>
AttrValue<std::vector<int64_t>> ExpandTimes(const Ctx& c) {
  return IntListAttrOrTensor(c, "ExpandTimes", "expand_times_tensor", "expand_times");
}

// Times only known at run time (build time, from an input) leave every dim
// -1.
Shape ExpandedShape(const Shape& x, const AttrValue<std::vector<int64_t>>& times, const std::string& where) {
  NABLA_ENFORCE_VALUE(times.size < 0 || times.size == static_cast<int64_t>(x.size()), times, where, ": ", times.source,
                      " must have one entry per dim of X (shape ", ShapeToString(x), "), but received ",
                      times.Known() ? ValuesToString(*times) : StrCat(times.size, " entries"));
  if (!times.Known()) return Shape(x.size(), -1);
  Shape out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    NABLA_ENFORCE_VALUE((*times)[i] >= 1, times, where, ": every entry of ", times.source, " must be >= 1, ",
                        "but received ", ValuesToString(*times));
    out[i] = x[i] < 0 ? -1 : x[i] * (*times)[i];
  }
  return out;
}

void InferExpandShape(InferShapeContext& c) {
  c.SetOutputShape("Out", ExpandedShape(c.InputShape("X"), ExpandTimes(c), c.Where()));
  c.SetOutputDType("Out", c.InputDType("X"));
}

// f(index into Out, index into X) for every element of Out, in order.
template <typename F>
void ForEachTiled(const Shape& x, const Shape& out, F&& f) {
  const size_t rank = x.size();
  const int64_t total = NumElements(out);
  if (total == 0) return;
  std::vector<int64_t> stride(rank, 1), idx(rank, 0);
  for (size_t k = rank; k-- > 1;) stride[k - 1] = stride[k] * x[k];
  int64_t ix = 0;
  for (int64_t io = 0; io < total; ++io) {
    f(io, ix);
    for (size_t k = rank; k-- > 0;) {
      ++idx[k];
      ix += idx[k] % x[k] == 0 ? stride[k] * (1 - x[k]) : stride[k];
      if (idx[k] < out[k]) break;
      idx[k] = 0;
    }
  }
}

template <typename T>
struct ExpandKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    Shape out = ExpandedShape(x.GetShape(), ExpandTimes(ctx), "op 'expand'");
    const T* src = x.Data<T>();
    T* dst = AllocOutput<T>(ctx, ctx.Output("Out"), out);
    ForEachTiled(x.GetShape(), out, [&](int64_t io, int64_t ix) { dst[io] = src[ix]; });
  }
};

template <typename T>
struct ExpandGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output("X@GRAD");
    if (!dx) return;
    const Shape& x = ctx.Input("X").GetShape();
    Shape out = ExpandedShape(x, ExpandTimes(ctx), "op 'expand_grad'");
    const Tensor& dout = ctx.Input("Out@GRAD");
    NABLA_ENFORCE(dout.GetShape() == out, kInvalidArgument, "op 'expand_grad': expected Out@GRAD of shape ",
                  ShapeToString(out), ", but received ", ShapeToString(dout.GetShape()));
    const T* src = dout.Data<T>();
    T* dst = AllocOutput<T>(ctx, dx, x);
    std::fill(dst, dst + NumElements(x), T(0));
    ForEachTiled(x, out, [&](int64_t io, int64_t ix) { dst[ix] += src[io]; });
  }
};

NABLA_REGISTER_OPS(expand) {
  registrar.Op("expand", __FILE__, __LINE__)
      .Doc("Out = X repeated expand_times[i] times along each dim i: Out.shape[i] = X.shape[i] * expand_times[i].")
      .Input("X", "(Tensor) the tensor to tile")
      .Input("ExpandTimes",
             "(Tensor<int32|int64>, optional) 1-D: expand_times at run time; before expand_times_tensor and the "
             "attribute; no gradient",
             kTensorAttrInput)
      .Input("expand_times_tensor",
             "(Tensors<int32|int64>, optional) one single-element tensor per dim: expand_times at run time; before "
             "the attribute; no gradient",
             kTensorAttrListInput)
      .Output("Out", "(Tensor) the tiled tensor")
      .Attr<std::vector<int>>("expand_times", {},
                              "(ints, default []) how many times to repeat X along each dim, each >= 1, unless "
                              "ExpandTimes or expand_times_tensor gives them")
      .InferShape(InferExpandShape)
      .GradMaker<GradFromInputsMaker>()
      .GradCheck(CheckCase("two_dims", {CheckInput("X", {2, 3})}, {{"expand_times", std::vector<int>{3, 2}}}))
      .GradCheck(CheckCase("middle_one", {CheckInput("X", {2, 1, 2})}, {{"expand_times", std::vector<int>{1, 4, 1}}}));
  registrar.DefaultGradOp("expand", __FILE__, __LINE__).InferShape(InferGradShapes);
  RegisterCpuKernels<ExpandKernel, float, double, int32_t, int64_t, bool>(registrar, "expand", __FILE__, __LINE__);
  RegisterCpuKernels<ExpandGradKernel, float, double>(registrar, "expand_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
