// softmax along one axis, max-subtracted so exp never overflows. The
// gradient reads Out: dX = Out * (dOut - sum(dOut * Out)) along the axis.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "nabla/cpu/vmath.h"
#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

template <typename T>
void SoftmaxKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), x.Rank(), "axis", "softmax");
  const AxisView v = ViewAround(x.GetShape(), axis);
  const T* px = x.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), x.GetShape());
  if constexpr (std::is_same_v<T, float>) {
    if (v.inner == 1) {  // contiguous rows (the last axis): the vector row kernels
      ForEachAxisRow(v, [&](int64_t, int64_t base) {
        const float m = cpu::RowMax(px + base, v.dim);
        const float sum = cpu::ExpShiftedSum(px + base, m, po + base, v.dim);
        cpu::ScaleRow(po + base, 1.0f / sum, v.dim);
      });
      return;
    }
  }
  // Rows (one per outer x inner position) are independent: split over them.
  ForEachAxisRow(v, [&](int64_t, int64_t base) {
    const T* xs = px + base;
    T* os = po + base;
    T m = xs[0];
    for (int64_t d = 1; d < v.dim; ++d) m = std::max(m, xs[d * v.inner]);
    double sum = 0.0;
    for (int64_t d = 0; d < v.dim; ++d) {
      os[d * v.inner] = std::exp(xs[d * v.inner] - m);
      sum += static_cast<double>(os[d * v.inner]);
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t d = 0; d < v.dim; ++d) os[d * v.inner] *= inv;
  });
}

template <typename T>
void SoftmaxGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& out = ctx.Input("Out");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), out.Rank(), "axis", "softmax_grad");
  const AxisView v = ViewAround(out.GetShape(), axis);
  const T* py = out.Data<T>();
  const T* pdy = dout.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), out.GetShape());
  if constexpr (std::is_same_v<T, float>) {
    if (v.inner == 1) {
      ForEachAxisRow(v, [&](int64_t, int64_t base) { cpu::SoftmaxGradRow(py + base, pdy + base, pdx + base, v.dim); });
      return;
    }
  }
  ForEachAxisRow(v, [&](int64_t, int64_t base) {
    double dot = 0.0;
    for (int64_t d = 0; d < v.dim; ++d)
      dot += static_cast<double>(py[base + d * v.inner]) * static_cast<double>(pdy[base + d * v.inner]);
    for (int64_t d = 0; d < v.dim; ++d) {
      const int64_t k = base + d * v.inner;
      pdx[k] = static_cast<T>(static_cast<double>(py[k]) * (static_cast<double>(pdy[k]) - dot));
    }
  });
}

}  // namespace

NABLA_REGISTER_OPS(softmax) {
  GradCheckSpec last = CheckCase("last_axis", {CheckInput("X", {3, 5}, -2.0, 2.0)});
  GradCheckSpec middle = CheckCase("middle_axis", {CheckInput("X", {2, 3, 4}, -2.0, 2.0)}, {{"axis", 1}});
  AlongAxisSchema(registrar, "softmax",
                  "Softmax along `axis`: Out = exp(X - max) / sum(exp(X - max)); subtracting the max keeps exp finite.",
                  "(Tensor) softmax of X, shape and dtype of X",
                  "Gradient of softmax: X@GRAD = Out * (Out@GRAD - sum(Out@GRAD * Out, axis)).", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .GradCheck(last)
      .GradCheck(middle);
  RegisterFloatKernels(registrar, "softmax", SoftmaxKernel<float>, SoftmaxKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "softmax_grad", SoftmaxGradKernel<float>, SoftmaxGradKernel<double>, __FILE__,
                       __LINE__);
}

}  // namespace nabla::nn
