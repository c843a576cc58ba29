// top_k: the k largest values along the last axis with their indices,
// largest first; ties keep the lower index first, so results are stable.
// NaN counts as the largest value (torch.topk; arg_max does the same), all
// NaNs equal: `>` alone is no strict weak order once a row holds NaN, and
// std::partial_sort with it is undefined (it dropped a row's maximum).
// The gradient is Paddle's top_k_grad: X@GRAD is zero but for Out@GRAD
// scattered to the positions Indices names.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <type_traits>

#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

// a ranks before b: a larger, or NaN where b is not.
template <typename T>
bool RanksAbove(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

template <typename T>
void TopKKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t k = ctx.Attr<int>("k");
  const int64_t d = x.GetShape().back();
  NABLA_ENFORCE(k <= d, kOutOfRange, "k = ", k, " must not exceed the last dim of X, but X has shape ",
                ShapeToString(x.GetShape()));
  const int64_t rows = d == 0 ? 0 : x.Numel() / d;
  Shape out_shape = x.GetShape();
  out_shape.back() = k;
  const T* px = x.Data<T>();
  T* pv = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), out_shape);
  int64_t* pi = ctx.Output("Indices")->Allocate<int64_t>(ctx.GetDevice(), out_shape);
  std::vector<int64_t> order(d);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = px + r * d;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int64_t a, int64_t b) {
      return RanksAbove(row[a], row[b]) || (!RanksAbove(row[b], row[a]) && a < b);
    });
    for (int64_t j = 0; j < k; ++j) {
      pv[r * k + j] = row[order[j]];
      pi[r * k + j] = order[j];
    }
  }
}

// X@GRAD[r, Indices[r, j]] = Out@GRAD[r, j], zero elsewhere. Indices are
// distinct within a row (top_k wrote them), so nothing adds up.
template <typename T>
void TopKGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Shape& xs = ctx.Input("X").GetShape();
  const Tensor& indices = ctx.Input("Indices");
  const IndexReader indices_at(indices);
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const int64_t d = xs.back();
  const int64_t k = indices.GetShape().back();
  const int64_t rows = d == 0 ? 0 : NumElements(xs) / d;
  NABLA_ENFORCE(indices.GetShape() == dout.GetShape() && indices.Numel() == rows * k, kInvalidArgument,
                "op 'top_k_grad': Indices and Out@GRAD must have X's shape with k last, but received X ",
                ShapeToString(xs), ", Indices ", ShapeToString(indices.GetShape()), " and Out@GRAD ",
                ShapeToString(dout.GetShape()));
  const T* pg = dout.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), xs);
  std::fill(pdx, pdx + rows * d, T(0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = indices_at[r * k + j];
      NABLA_ENFORCE(i >= 0 && i < d, kOutOfRange, "op 'top_k_grad': Indices[", r * k + j, "] must be in [0, ", d,
                    "), but received ", i);
      pdx[r * d + i] = pg[r * k + j];
    }
}

void InferTopK(InferShapeContext& c) {
  Shape s = c.InputShape("X");
  const DType dt = c.InputDType("X");
  NABLA_ENFORCE(dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kInt32 || dt == DType::kInt64,
                kInvalidArgument, c.Where(), ": X must be float32, float64, int32 or int64, but received ",
                DTypeName(dt));
  const int k = c.Attr<int>("k");
  NABLA_ENFORCE(!s.empty(), kInvalidArgument, c.Where(), ": X must have rank >= 1, but received a scalar");
  NABLA_ENFORCE(s.back() < 0 || k <= s.back(), kOutOfRange, c.Where(), ": k = ", k,
                " must not exceed the last dim of X, but X has shape ", ShapeToString(s));
  s.back() = k;
  c.SetOutputShape("Out", s);
  c.SetOutputDType("Out", c.InputDType("X"));
  c.SetOutputShape("Indices", s);
  c.SetOutputDType("Indices", DType::kInt64);
}

}  // namespace

NABLA_REGISTER_OPS(top_k) {
  // Distinct values, far apart next to the finite differences: the top-k set
  // and its order stay put.
  GradCheckSpec rows = CheckCase("rows", {CheckInput("X", {3, 5})}, {{"k", 2}}, {{"Out", 1}, {"Indices", 1}});
  rows.inputs[0].values = {0.3, -0.9, 0.8, 0.1, -0.2, -0.5, 0.6, 0.9, -0.1, 0.2, 0.7, 0.4, -0.3, -0.8, 0.05};
  rows.no_grad_outputs = {"Indices"};
  GradCheckSpec rank3 =
      CheckCase("rank3_k_all", {CheckInput("X", {2, 2, 3})}, {{"k", 3}}, {{"Out", 1}, {"Indices", 1}});
  rank3.inputs[0].values = {0.5, -0.5, 0.1, 0.9, 0.2, -0.7, -0.3, 0.8, 0.4, 0.0, -0.6, 0.3};
  rank3.no_grad_outputs = {"Indices"};
  registrar.Op("top_k", __FILE__, __LINE__)
      .Doc(
          "The k largest entries of X along its last axis, largest first (ties: lower index first; NaN counts as "
          "the largest), and their indices. The gradient scatters Out@GRAD to Indices.")
      .Input("X", "(Tensor) input of shape [..., D], float32, float64, int32 or int64")
      .Output("Out", "(Tensor) the k largest values, shape [..., k], dtype of X")
      .Output("Indices", "(Tensor) int64 positions of those values in X's last axis, shape [..., k]")
      .Attr<int>(
          "k", 1, "(int, default 1) how many entries to keep",
          [](const int& k) { NABLA_ENFORCE(k >= 1, kInvalidArgument, "attribute k must be >= 1, but received ", k); })
      .InferShape(InferTopK)
      .GradMaker(OneGradOpIfWanted(
          "X",
          [](const GradContext& g, const std::vector<std::string>& dx) {
            return MakeOp(
                "top_k_grad",
                {{"X", g.Input("X")}, {"Indices", g.Output("Indices")}, {GradVarName("Out"), g.OutputGrad("Out")}},
                {{GradVarName("X"), dx}}, g.Attrs());
          }))
      .GradCheck(rows)
      .GradCheck(rank3);
  OpBuilder& grad = registrar.DefaultGradOp("top_k", __FILE__, __LINE__)
                        .Doc(
                            "Gradient of top_k: X@GRAD is zero but for Out@GRAD scattered to Indices along the "
                            "last axis (X is read for its shape only).")
                        .InferShape([](InferShapeContext& c) { InferSameAs(c, "X", GradVarName("X")); })
                        .KernelDType(DTypeOfInput(GradVarName("Out")));
  grad.NoBufferInput("X");
  RegisterFloatKernels(registrar, "top_k", TopKKernel<float>, TopKKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("top_k", DeviceType::kCPU, DType::kInt32, TopKKernel<int32_t>, __FILE__, __LINE__);
  registrar.Kernel("top_k", DeviceType::kCPU, DType::kInt64, TopKKernel<int64_t>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "top_k_grad", TopKGradKernel<float>, TopKGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
