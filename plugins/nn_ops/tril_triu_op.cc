// tril_triu (Paddle's): keeps the lower (lower = true: col - row <= diagonal)
// or upper (col - row >= diagonal) triangle of each matrix in X's last two
// dims and zeros the rest, so a program can build its own attention mask. The
// gradient masks Out@GRAD the same way.
#include <algorithm>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void TriangleOf(const ExecutionContext& ctx, const Tensor& x, Tensor* out) {
  const Shape& shape = x.GetShape();
  const int64_t rows = shape[shape.size() - 2];
  const int64_t cols = shape.back();
  const int64_t matrices = rows * cols == 0 ? 0 : x.Numel() / (rows * cols);
  const int64_t diagonal = ctx.Attr<int>("diagonal");
  const bool lower = ctx.Attr<bool>("lower");
  const T* px = x.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), shape);
  cpu::ParallelFor(matrices * rows, cpu::GrainForRows(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t row = r % rows;
      // Columns [keep_begin, keep_end) of this row survive.
      const int64_t edge = std::clamp<int64_t>(row + diagonal, -1, cols);
      const int64_t keep_begin = lower ? 0 : std::max<int64_t>(edge, 0);
      const int64_t keep_end = lower ? std::min(edge + 1, cols) : cols;
      const T* src = px + r * cols;
      T* dst = po + r * cols;
      std::fill(dst, dst + keep_begin, T(0));
      std::copy(src + keep_begin, src + std::max(keep_begin, keep_end), dst + keep_begin);
      std::fill(dst + std::max(keep_begin, keep_end), dst + cols, T(0));
    }
  });
}

template <typename T>
struct TrilTriuKernel {
  void operator()(const ExecutionContext& ctx) const { TriangleOf<T>(ctx, ctx.Input("X"), ctx.Output("Out")); }
};

template <typename T>
struct TrilTriuGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    if (Tensor* dx = ctx.Output(GradVarName("X"))) TriangleOf<T>(ctx, ctx.Input(GradVarName("Out")), dx);
  }
};

void InferTrilTriu(InferShapeContext& c) {
  const Shape x = c.InputShape("X");
  NABLA_ENFORCE(x.size() >= 2, kInvalidArgument, c.Where(),
                ": X must have rank >= 2 (matrices in its last two dims), but received shape ", ShapeToString(x));
  c.ShareShapeAndDType("X", "Out");
}

}  // namespace

NABLA_REGISTER_OPS(tril_triu) {
  GradCheckSpec lower = CheckCase("lower_diag1", {CheckInput("X", {2, 3, 4})}, {{"diagonal", 1}});
  GradCheckSpec upper = CheckCase("upper_diag_neg1", {CheckInput("X", {4, 3})}, {{"diagonal", -1}, {"lower", false}});
  registrar.Op("tril_triu", __FILE__, __LINE__)
      .Doc(
          "Lower (lower = true) or upper triangle of the matrices in X's last two dims: Out[..., i, j] = X[..., i, j] "
          "where j - i <= diagonal (lower) or j - i >= diagonal (upper), else 0.")
      .Input("X", "(Tensor) input of rank >= 2, float32, float64, int32 or int64")
      .Output("Out", "(Tensor) the triangle, shape and dtype of X")
      .Attr<int>("diagonal", 0,
                 "(int, default 0) the diagonal bounding the triangle: 0 the main one, > 0 above it, < 0 below it")
      .Attr<bool>("lower", true, "(bool, default true) keep the lower triangle (tril); false keeps the upper (triu)")
      .InferShape(InferTrilTriu)
      .GradMaker(OneGradOpIfWanted("X",
                                   [](const GradContext& g, const std::vector<std::string>& dx) {
                                     return MakeOp("tril_triu_grad", {{GradVarName("Out"), g.OutputGrad("Out")}},
                                                   {{GradVarName("X"), dx}}, g.Attrs());
                                   }))
      .GradCheck(lower)
      .GradCheck(upper);
  OpBuilder& grad = registrar.DefaultGradOp("tril_triu", __FILE__, __LINE__);
  grad.Doc("Gradient of tril_triu: Out@GRAD with the same triangle kept.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, GradVarName("Out"), GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterCpuKernels<TrilTriuKernel, float, double, int32_t, int64_t>(registrar, "tril_triu", __FILE__, __LINE__);
  RegisterCpuKernels<TrilTriuGradKernel, float, double>(registrar, "tril_triu_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
