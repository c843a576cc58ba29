// OpenCL kernels of mul and matmul and their grad ops: GEMMs through CLBlast
// on the device's queue, one per batch (with buffer offsets, no copies), so
// no OpenCL C of their own.
#include "gemm_grad_passes.h"
#include "gemm_shapes.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

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
    RefuseAccumulate(ctx, "opencl");
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

template <typename T>
struct MatmulKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
    const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
    const MatmulDims d = ComputeMatmulDims(x.GetShape(), y.GetShape(), tx, ty, StrCat("op '", ctx.Op().Type(), "'"));
    const void* xb = s.In(x);
    const void* yb = s.In(y);
    void* ob = AllocateOutput<T>(ctx, ctx.Output("Out"), d.out);
    const int64_t m = d.m, k = d.k, n = d.n;
    BroadcastIndexer(d.out_batch, d.x_batch, d.y_batch).ForEach([&](int64_t io, int64_t ix, int64_t iy) {
      dev.Gemm(tx, ty, m, n, k, alpha, xb, ix * m * k, tx ? m : k, yb, iy * k * n, ty ? k : n, T(0), ob, io * m * n, n);
    });
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
    const MatmulDims dims = ComputeMatmulDims(x.GetShape(), y.GetShape(), tx, ty, StrCat("op '", ctx.Op().Type(), "'"));
    RefuseAccumulate(ctx, "opencl");
    const void* xb = s.In(x);
    const void* yb = s.In(y);
    const void* db = s.In(ctx.Input(GradVarName("Out")));
    Tensor* dx = ctx.Output(GradVarName("X"));
    Tensor* dy = ctx.Output(GradVarName("Y"));
    void* gx = dx ? AllocateOutput<T>(ctx, dx, x.GetShape()) : nullptr;
    void* gy = dy ? AllocateOutput<T>(ctx, dy, y.GetShape()) : nullptr;
    if (gx) Zero<T>(dev, gx, x.Numel());
    if (gy) Zero<T>(dev, gy, y.Numel());
    const int64_t m = dims.m, k = dims.k, n = dims.n, ldx = tx ? m : k, ldy = ty ? k : n;
    BroadcastIndexer(dims.out_batch, dims.x_batch, dims.y_batch).ForEach([&](int64_t io, int64_t ix, int64_t iy) {
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
    });
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
