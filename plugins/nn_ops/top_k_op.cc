// top_k: the k largest values along the last axis with their indices,
// largest first; ties keep the lower index first, so results are stable.
// No gradient here: nabla uses top_k for metrics (accuracy). Paddle does
// have top_k_grad (scatter Out@GRAD to Indices); it can be added when a
// model differentiates through top_k.
#include <algorithm>
#include <numeric>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

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
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [row](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int64_t j = 0; j < k; ++j) {
      pv[r * k + j] = row[order[j]];
      pi[r * k + j] = order[j];
    }
  }
}

void InferTopK(InferShapeContext& c) {
  Shape s = c.InputShape("X");
  EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
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
  registrar.Op("top_k", __FILE__, __LINE__)
      .Doc(
          "The k largest entries of X along its last axis, largest first (ties: lower index first), and their "
          "indices. Registered without a gradient.")
      .Input("X", "(Tensor) input of shape [..., D], float32 or float64")
      .Output("Out", "(Tensor) the k largest values, shape [..., k], dtype of X")
      .Output("Indices", "(Tensor) int64 positions of those values in X's last axis, shape [..., k]")
      .Attr<int>(
          "k", 1, "(int, default 1) how many entries to keep",
          [](const int& k) { NABLA_ENFORCE(k >= 1, kInvalidArgument, "attribute k must be >= 1, but received ", k); })
      .InferShape(InferTopK)
      .GradMaker<EmptyGradOpDescMaker>();
  RegisterFloatKernels(registrar, "top_k", TopKKernel<float>, TopKKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
