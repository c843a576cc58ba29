// acme_linear: Out = X·W + B, a fused fully connected layer (mul followed by
// elementwise_add). It has no grad op of its own: its GradOpDescMaker builds
// the gradient from standard ops (matmul and reduce_sum from math_ops), as
// Paddle's `minus` does, so only the forward kernels live here.
#include <memory>
#include <string>
#include <vector>

#include "nabla/opkit/opkit.h"
#include "nabla/plugin.h"

namespace acme {
namespace {

using nabla::ExecutionContext;
using nabla::GradVarName;
using nabla::InferShapeContext;
using nabla::OpDesc;
using nabla::Shape;
using nabla::ShapeToString;
using nabla::Tensor;

void InferLinearShape(InferShapeContext& c) {
  const Shape x = c.InputShape("X"), w = c.InputShape("W"), b = c.InputShape("B");
  NABLA_ENFORCE(x.size() == 2 && w.size() == 2, kInvalidArgument, c.Where(),
                ": expected X [N, K] and W [K, M] of rank 2 but received X ", ShapeToString(x), " and W ",
                ShapeToString(w));
  NABLA_ENFORCE(x[1] < 0 || w[0] < 0 || x[1] == w[0], kInvalidArgument, c.Where(),
                ": expected the columns of X to match the rows of W but received X ", ShapeToString(x), " and W ",
                ShapeToString(w));
  NABLA_ENFORCE(b.size() == 1 && (b[0] < 0 || w[1] < 0 || b[0] == w[1]), kInvalidArgument, c.Where(),
                ": expected B of shape [M] with M the columns of W ", ShapeToString(w), " but received ",
                ShapeToString(b));
  c.SetOutputShape("Out", {x[0], w[1]});
  c.SetOutputDType("Out", c.InputDType("X"));
}

template <typename T>
void LinearKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& w = ctx.Input("W");
  const Tensor& b = ctx.Input("B");
  const int64_t n = x.GetShape()[0], k = x.GetShape()[1], m = w.GetShape()[1];
  NABLA_ENFORCE(w.GetShape()[0] == k && b.Numel() == m, kInvalidArgument, "op 'acme_linear': expected W [", k,
                ", M] and B [M] but received W ", ShapeToString(w.GetShape()), " and B ", ShapeToString(b.GetShape()));
  const T* px = x.Data<T>();
  const T* pw = w.Data<T>();
  const T* pb = b.Data<T>();
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), {n, m});
  for (int64_t i = 0; i < n; ++i) {
    T* row = out + i * m;
    for (int64_t j = 0; j < m; ++j) row[j] = pb[j];
    for (int64_t p = 0; p < k; ++p) {
      const T xv = px[i * k + p];
      const T* wrow = pw + p * m;
      for (int64_t j = 0; j < m; ++j) row[j] += xv * wrow[j];
    }
  }
}

// X@GRAD = matmul(Out@GRAD, W, transpose_Y), W@GRAD = matmul(X, Out@GRAD,
// transpose_X), B@GRAD = reduce_sum(Out@GRAD, dim 0). A gradient nobody
// needs (@EMPTY@) gets no op.
class LinearGradMaker : public nabla::GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    using nabla::opkit::GradWanted;
    using nabla::opkit::MakeOp;
    std::vector<std::unique_ptr<OpDesc>> ops;
    const std::vector<std::string> dout = OutputGrad("Out");
    if (const auto dx = InputGrad("X"); GradWanted(dx))
      ops.push_back(MakeOp("matmul", {{"X", dout}, {"Y", Input("W")}}, {{"Out", dx}}, {{"transpose_Y", true}}));
    if (const auto dw = InputGrad("W"); GradWanted(dw))
      ops.push_back(MakeOp("matmul", {{"X", Input("X")}, {"Y", dout}}, {{"Out", dw}}, {{"transpose_X", true}}));
    if (const auto db = InputGrad("B"); GradWanted(db))
      ops.push_back(MakeOp("reduce_sum", {{"X", dout}}, {{"Out", db}},
                           {{"dim", std::vector<int>{0}}, {"keep_dim", false}, {"reduce_all", false}}));
    return ops;
  }
};

}  // namespace

NABLA_REGISTER_OPS(acme_linear) {
  using nabla::opkit::CheckInput;
  nabla::GradCheckSpec all =
      nabla::opkit::CheckCase("all_inputs", {CheckInput("X", {3, 4}), CheckInput("W", {4, 2}), CheckInput("B", {2})});
  nabla::GradCheckSpec params_only = all;
  params_only.name = "params_only";
  params_only.inputs[0].check = false;  // X@GRAD is @EMPTY@: no matmul for it
  registrar.Op("acme_linear", __FILE__, __LINE__)
      .Doc("Fully connected layer: Out = X·W + B (mul and elementwise_add fused).")
      .Input("X", "(Tensor) [N, K] input")
      .Input("W", "(Tensor) [K, M] weights")
      .Input("B", "(Tensor) [M] bias")
      .Output("Out", "(Tensor) [N, M], dtype of X")
      .InferShape(InferLinearShape)
      .GradMaker<LinearGradMaker>()
      .GradCheck(all)
      .GradCheck(params_only);
  nabla::opkit::RegisterFloatKernels(registrar, "acme_linear", LinearKernel<float>, LinearKernel<double>, __FILE__,
                                     __LINE__);
}

}  // namespace acme
