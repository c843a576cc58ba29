// gather: the slices of X at the positions listed in Index along `axis`
// (PyTorch's index_select). The gradient adds each slice of Out@GRAD into
// X@GRAD at its index, so repeated indices accumulate.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

void CheckIndexShape(const Shape& index, const std::string& where) {
  NABLA_ENFORCE(index.size() == 1 || (index.size() == 2 && (index[1] == 1 || index[1] < 0)), kInvalidArgument, where,
                ": Index must have shape [K] or [K, 1], but received ", ShapeToString(index));
}

void InferGatherShape(InferShapeContext& c) {
  Shape x = c.InputShape("X");
  const Shape index = c.InputShape("Index");
  CheckIndexShape(index, c.Where());
  const DType id = c.InputDType("Index");
  NABLA_ENFORCE(id == DType::kInt64 || id == DType::kInt32, kInvalidArgument, c.Where(),
                ": Index must be int64 or int32, but received ", DTypeName(id));
  const int axis = NormalizeAxis(c.Attr<int>("axis"), x.size(), "axis", c.Where());
  x[axis] = index[0];
  c.SetOutputShape("Out", x);
  c.SetOutputDType("Out", c.InputDType("X"));
}

// Index as int64 positions, each checked against X's dim along the axis.
std::vector<int64_t> ReadIndex(const ExecutionContext& ctx, const Shape& x, int axis) {
  const Tensor& t = ctx.Input("Index");
  const std::string where = StrCat("op '", ctx.Op().Type(), "'");
  CheckIndexShape(t.GetShape(), where);
  std::vector<int64_t> idx(static_cast<size_t>(t.Numel()));
  // Read once: over the C ABI each of these is a table call.
  const bool i32 = t.GetDType() == DType::kInt32;
  const int32_t* p32 = i32 ? t.Data<int32_t>() : nullptr;
  const int64_t* p64 = i32 ? nullptr : t.Data<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    idx[i] = i32 ? p32[i] : p64[i];
    NABLA_ENFORCE(idx[i] >= 0 && idx[i] < x[axis], kOutOfRange, where, ": Index[", i, "] = ", idx[i],
                  " is out of range [0, ", x[axis], ") for axis ", axis, " of X (shape ", ShapeToString(x), ")");
  }
  return idx;
}

template <typename T>
struct GatherKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const int axis = NormalizeAxis(ctx.Attr<int>("axis"), x.Rank(), "axis", "op 'gather'");
    std::vector<int64_t> idx = ReadIndex(ctx, x.GetShape(), axis);
    const int64_t outer = ProductOf(x.GetShape(), 0, axis), dim = x.GetShape()[axis];
    const int64_t inner = ProductOf(x.GetShape(), axis + 1, x.Rank());
    const int64_t k = static_cast<int64_t>(idx.size());
    Shape out_shape = x.GetShape();
    out_shape[axis] = k;
    const T* src = x.Data<T>();
    T* dst = AllocOutput<T>(ctx, ctx.Output("Out"), out_shape);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j) {
        const T* from = src + (o * dim + idx[j]) * inner;
        std::copy(from, from + inner, dst + (o * k + j) * inner);
      }
  }
};

template <typename T>
struct GatherGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output("X@GRAD");
    if (!dx) return;
    const Shape& x = ctx.Input("X").GetShape();
    const int axis = NormalizeAxis(ctx.Attr<int>("axis"), x.size(), "axis", "op 'gather_grad'");
    std::vector<int64_t> idx = ReadIndex(ctx, x, axis);
    const int64_t outer = ProductOf(x, 0, axis), dim = x[axis], inner = ProductOf(x, axis + 1, x.size());
    const int64_t k = static_cast<int64_t>(idx.size());
    const Tensor& dout = ctx.Input("Out@GRAD");
    NABLA_ENFORCE(dout.Numel() == outer * k * inner, kInvalidArgument, "op 'gather_grad': expected Out@GRAD with ",
                  outer * k * inner, " elements, but received shape ", ShapeToString(dout.GetShape()));
    const T* src = dout.Data<T>();
    T* dst = AllocOutput<T>(ctx, dx, x);
    std::fill(dst, dst + NumElements(x), T(0));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j) {
        const T* from = src + (o * k + j) * inner;
        T* to = dst + (o * dim + idx[j]) * inner;
        for (int64_t i = 0; i < inner; ++i) to[i] += from[i];
      }
  }
};

GradCheckInput IndexValues(Shape shape, std::vector<double> values) {
  GradCheckInput in = NoCheck(CheckInput("Index", std::move(shape)));
  in.dtype = DType::kInt64;
  in.values = std::move(values);
  return in;
}

NABLA_REGISTER_OPS(gather) {
  registrar.Op("gather", __FILE__, __LINE__)
      .Doc(
          "Out = the slices of X along `axis` at the positions in Index, in Index's order: Out's shape is X's with "
          "dim `axis` replaced by the number of indices. Every index must be in [0, X.shape[axis]).")
      .Input("X", "(Tensor) the tensor to gather from")
      .Input("Index", "(Tensor, int64 or int32) the positions, of shape [K] or [K, 1]")
      .Output("Out", "(Tensor) the gathered slices")
      .Attr<int>("axis", 0, "(int, default 0) the dim of X that Index selects along; negative counts from the end")
      .InferShape(InferGatherShape)
      .GradMaker<GradFromInputsMaker>()
      .GradCheck(CheckCase("rows_with_repeats", {CheckInput("X", {4, 3}), IndexValues({5}, {3, 0, 3, 1, 3})}))
      .GradCheck(CheckCase("last_axis", {CheckInput("X", {2, 3, 4}), IndexValues({3, 1}, {2, 0, 2})}, {{"axis", -1}}));
  registrar.DefaultGradOp("gather", __FILE__, __LINE__).InferShape(InferGradShapes);
  RegisterCpuKernels<GatherKernel, float, double, int32_t, int64_t>(registrar, "gather", __FILE__, __LINE__);
  RegisterCpuKernels<GatherGradKernel, float, double>(registrar, "gather_grad", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
