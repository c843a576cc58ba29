// log_softmax along one axis: Out = (X - max) - log(sum(exp(X - max))), which
// stays finite where softmax underflows. X - max is exact where X is close
// to its max; forming max + log(sum) first would round it at X's magnitude
// (1e-3 of error at X = 1e4 in float32). The gradient reads Out:
// dX = dOut - exp(Out) * sum(dOut) along the axis.
#include <algorithm>
#include <cmath>

#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void LogSoftmaxKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), x.Rank(), "axis", "log_softmax");
  const AxisView v = ViewAround(x.GetShape(), axis);
  const T* px = x.Data<T>();
  T* po = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  ForEachAxisRow(v, [&](int64_t, int64_t base) {
    T m = px[base];
    for (int64_t d = 1; d < v.dim; ++d) m = std::max(m, px[base + d * v.inner]);
    double sum = 0.0;
    for (int64_t d = 0; d < v.dim; ++d) sum += std::exp(static_cast<double>(px[base + d * v.inner] - m));
    const double log_sum = std::log(sum);
    for (int64_t d = 0; d < v.dim; ++d)
      po[base + d * v.inner] = static_cast<T>(static_cast<double>(px[base + d * v.inner] - m) - log_sum);
  });
}

template <typename T>
void LogSoftmaxGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& out = ctx.Input("Out");
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), out.Rank(), "axis", "log_softmax_grad");
  const AxisView v = ViewAround(out.GetShape(), axis);
  const T* py = out.Data<T>();
  const T* pdy = ctx.Input(GradVarName("Out")).Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), out.GetShape());
  ForEachAxisRow(v, [&](int64_t, int64_t base) {
    double sum = 0.0;
    for (int64_t d = 0; d < v.dim; ++d) sum += static_cast<double>(pdy[base + d * v.inner]);
    for (int64_t d = 0; d < v.dim; ++d) {
      const int64_t k = base + d * v.inner;
      pdx[k] = static_cast<T>(static_cast<double>(pdy[k]) - std::exp(static_cast<double>(py[k])) * sum);
    }
  });
}

}  // namespace

NABLA_REGISTER_OPS(log_softmax) {
  GradCheckSpec last = CheckCase("last_axis", {CheckInput("X", {3, 5}, -2.0, 2.0)});
  GradCheckSpec first = last;
  first.name = "first_axis_negative";
  first.inputs = {CheckInput("X", {3, 2, 4}, -2.0, 2.0)};
  first.attrs = {{"axis", -3}};
  AlongAxisSchema(registrar, "log_softmax",
                  "Log of softmax along `axis`: Out = (X - max) - log(sum(exp(X - max))), finite for any finite X.",
                  "(Tensor) log_softmax of X, shape and dtype of X",
                  "Gradient of log_softmax: X@GRAD = Out@GRAD - exp(Out) * sum(Out@GRAD, axis).", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .GradCheck(last)
      .GradCheck(first);
  RegisterFloatKernels(registrar, "log_softmax", LogSoftmaxKernel<float>, LogSoftmaxKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "log_softmax_grad", LogSoftmaxGradKernel<float>, LogSoftmaxGradKernel<double>,
                       __FILE__, __LINE__);
}

}  // namespace nabla::nn
