// OpenCL kernels of mul and matmul and their grad ops: GEMMs through CLBlast
// on the device's queue, one per batch (with buffer offsets, no copies), so
// no OpenCL C of their own.
#include <algorithm>
#include <array>

#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

struct Flat2D {
  int64_t rows = 1, cols = 1;
};

Flat2D Flatten(const Shape& s, int num_col_dims) {
  Flat2D f;
  for (size_t i = 0; i < s.size(); ++i) (static_cast<int>(i) < num_col_dims ? f.rows : f.cols) *= s[i];
  return f;
}

template <typename T>
struct MulKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
    Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
    const void* xb = s.In(x);
    const void* yb = s.In(y);
    Tensor* out = ctx.Output("Out");
    void* ob = AllocateOutput<T>(ctx, out, out->GetShape());
    dev.Gemm(false, false, fx.rows, fy.cols, fx.cols, T(1), xb, 0, fx.cols, yb, 0, fy.cols, T(0), ob, 0, fy.cols);
  }
};

// X@GRAD = Out@GRAD Y^T and Y@GRAD = X^T Out@GRAD on the 2-D views.
template <typename T>
struct MulGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
    Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
    const int64_t m = fx.rows, k = fx.cols, n = fy.cols;
    const void* db = s.In(ctx.Input(GradVarName("Out")));
    if (Tensor* dx = ctx.Output(GradVarName("X"))) {
      const void* yb = s.In(y);
      dev.Gemm(false, true, m, k, n, T(1), db, 0, n, yb, 0, n, T(0), AllocateOutput<T>(ctx, dx, x.GetShape()), 0, k);
    }
    if (Tensor* dy = ctx.Output(GradVarName("Y"))) {
      const void* xb = s.In(x);
      dev.Gemm(true, false, k, n, m, T(1), xb, 0, k, db, 0, n, T(0), AllocateOutput<T>(ctx, dy, y.GetShape()), 0, n);
    }
  }
};

// matmul's batches: X [..., M, K] times Y [..., K, N] with numpy broadcasting
// of the batch dims; 1-D X is [1, K] and 1-D Y is [K, 1].
struct MatmulPlan {
  int64_t m = 0, k = 0, n = 0;
  // (out, x, y) batch indices of every GEMM.
  std::vector<std::array<int64_t, 3>> batches;
};

MatmulPlan PlanMatmul(const Shape& x0, const Shape& y0, bool tx, bool ty) {
  Shape x = x0.size() == 1 ? Shape{1, x0[0]} : x0;
  Shape y = y0.size() == 1 ? Shape{y0[0], 1} : y0;
  MatmulPlan p;
  int64_t xr = x[x.size() - 2], xc = x.back(), yr = y[y.size() - 2], yc = y.back();
  p.m = tx ? xc : xr;
  p.k = tx ? xr : xc;
  p.n = ty ? yr : yc;
  Shape xb(x.begin(), x.end() - 2), yb(y.begin(), y.end() - 2);
  size_t rank = std::max(xb.size(), yb.size());
  xb.insert(xb.begin(), rank - xb.size(), 1);
  yb.insert(yb.begin(), rank - yb.size(), 1);
  Shape ob(rank);
  int64_t total = 1;
  for (size_t i = 0; i < rank; ++i) {
    ob[i] = std::max(xb[i], yb[i]);
    total *= ob[i];
  }
  std::vector<int64_t> idx(rank, 0);
  for (int64_t io = 0; io < total; ++io) {
    int64_t ix = 0, iy = 0;
    for (size_t d = 0; d < rank; ++d) {
      ix = ix * xb[d] + (xb[d] == 1 ? 0 : idx[d]);
      iy = iy * yb[d] + (yb[d] == 1 ? 0 : idx[d]);
    }
    p.batches.push_back({io, ix, iy});
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < ob[d]) break;
      idx[d] = 0;
    }
  }
  return p;
}

template <typename T>
struct MatmulKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
    const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
    MatmulPlan p = PlanMatmul(x.GetShape(), y.GetShape(), tx, ty);
    const void* xb = s.In(x);
    const void* yb = s.In(y);
    Tensor* out = ctx.Output("Out");
    void* ob = AllocateOutput<T>(ctx, out, out->GetShape());
    const int64_t m = p.m, k = p.k, n = p.n;
    for (const auto& [io, ix, iy] : p.batches)
      dev.Gemm(tx, ty, m, n, k, alpha, xb, ix * m * k, tx ? m : k, yb, iy * k * n, ty ? k : n, T(0), ob, io * m * n, n);
  }
};

// The CPU kernel's formulas: gradients accumulate (beta 1) over the batches
// an input was broadcast to, after a zero fill.
template <typename T>
struct MatmulGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
    const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
    MatmulPlan p = PlanMatmul(x.GetShape(), y.GetShape(), tx, ty);
    const void* xb = s.In(x);
    const void* yb = s.In(y);
    const void* db = s.In(ctx.Input(GradVarName("Out")));
    Tensor* dx = ctx.Output(GradVarName("X"));
    Tensor* dy = ctx.Output(GradVarName("Y"));
    void* gx = dx ? AllocateOutput<T>(ctx, dx, x.GetShape()) : nullptr;
    void* gy = dy ? AllocateOutput<T>(ctx, dy, y.GetShape()) : nullptr;
    if (gx) Zero<T>(dev, gx, x.Numel());
    if (gy) Zero<T>(dev, gy, y.Numel());
    const int64_t m = p.m, k = p.k, n = p.n, ldx = tx ? m : k, ldy = ty ? k : n;
    for (const auto& [io, ix, iy] : p.batches) {
      const int64_t xo = ix * m * k, yo = iy * k * n, d = io * m * n;
      if (gx) {
        if (!tx)
          dev.Gemm(false, !ty, m, k, n, alpha, db, d, n, yb, yo, ldy, T(1), gx, xo, k);
        else
          dev.Gemm(ty, true, k, m, n, alpha, yb, yo, ldy, db, d, n, T(1), gx, xo, m);
      }
      if (gy) {
        if (!ty)
          dev.Gemm(!tx, false, k, n, m, alpha, xb, xo, ldx, db, d, n, T(1), gy, yo, n);
        else
          dev.Gemm(true, tx, n, k, m, alpha, db, d, n, xb, xo, ldx, T(1), gy, yo, k);
      }
    }
  }
};

}  // namespace

NABLA_REGISTER_OPS(gemm_opencl) {
  RegisterOpenClKernels<MulKernel>(registrar, "mul", __FILE__, __LINE__);
  RegisterOpenClKernels<MulGradKernel>(registrar, "mul_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<MatmulKernel>(registrar, "matmul", __FILE__, __LINE__);
  RegisterOpenClKernels<MatmulGradKernel>(registrar, "matmul_grad", __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
