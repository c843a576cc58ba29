// OpenCL kernels of conv2d (im2col + CLBlast GEMM per image and group) and
// pool2d, with their grad ops. The geometry comes from conv_util.h, so windows
// are sized exactly as on the CPU.
#include "conv_pool_cl.h"
#include "conv_util.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::nn {
namespace {

using namespace opencl;

KernelArg Geometry(const WindowAxis& h, const WindowAxis& w, int64_t channels, bool adaptive) {
  return Long8({h.in, w.in, h.k, w.k, h.out, w.out, channels, adaptive ? 1 : 0});
}

KernelArg Steps(const WindowAxis& h, const WindowAxis& w) {
  return Long8({h.stride, w.stride, h.dilation, w.dilation, h.pad_before, w.pad_before, h.pad_after, w.pad_after});
}

bool Nhwc(const ExecutionContext& ctx, const char* attr) {
  return IsNHWC(ctx.Attr<std::string>(attr), attr, "op '" + ctx.Op().Type() + "'");
}

// NHWC data computed as NCHW: `buf` transposed into `tmp`, or `buf` itself.
template <typename T>
const void* DeviceNchw(OpenClDevice& dev, const void* buf, bool nhwc, int64_t n, int64_t c, int64_t pixels,
                       Scratch<T>& tmp) {
  if (!nhwc) return buf;
  void* t = tmp.Allocate(n * c * pixels);
  Run<T>(dev, cl_source::conv_pool(), "transpose_channels",
         {KernelArg::Buffer(buf), KernelArg::Buffer(t), KernelArg(n), KernelArg(c), KernelArg(pixels), KernelArg(1)},
         n * c * pixels);
  return t;
}

// An NCHW result in `nchw` written to the NHWC output `out`.
template <typename T>
void DeviceNhwc(OpenClDevice& dev, const void* nchw, void* out, int64_t n, int64_t c, int64_t pixels) {
  Run<T>(dev, cl_source::conv_pool(), "transpose_channels",
         {KernelArg::Buffer(nchw), KernelArg::Buffer(out), KernelArg(n), KernelArg(c), KernelArg(pixels), KernelArg(0)},
         n * c * pixels);
}

template <typename T>
struct Conv2dKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("Input");
    const Tensor& w = ctx.Input("Filter");
    const bool nhwc = Nhwc(ctx, "data_format");
    const ConvGeom g = MakeConvGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d'");
    Scratch<T> x_nchw(dev), y_nchw(dev);
    const void* xb = DeviceNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw);
    const void* wb = s.In(w);
    const Shape ys{g.n, g.m, g.h.out, g.w.out};
    void* y = AllocateOutput<T>(ctx, ctx.Output("Output"), nhwc ? NhwcShapeOf(ys) : ys);
    void* yb = nhwc ? y_nchw.Allocate(NumElements(ys)) : y;
    const int64_t cg = g.CinPerGroup(), mg = g.CoutPerGroup(), k = g.ColRows(), plane = g.OutPlane();
    Scratch<T> col_t(dev);
    void* col = col_t.Allocate(k * plane);
    const KernelArg geo = Geometry(g.h, g.w, cg, false), steps = Steps(g.h, g.w);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const int64_t x_off = (n * g.c + gi * cg) * g.h.in * g.w.in;
        Run<T>(dev, cl_source::conv_pool(), "im2col",
               {KernelArg::Buffer(xb), KernelArg(x_off), KernelArg::Buffer(col), geo, steps}, k * plane);
        dev.Gemm(false, false, mg, plane, k, T(1), wb, gi * mg * k, k, col, 0, plane, T(0), yb,
                 (n * g.m + gi * mg) * plane, plane);
      }
    if (nhwc) DeviceNhwc<T>(dev, yb, y, g.n, g.m, plane);
  }
};

// dX = col2im(W^T dY) and dW = sum over images of dY im2col(X)^T, per group.
template <typename T>
struct Conv2dGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("Input");
    const Tensor& w = ctx.Input("Filter");
    const bool nhwc = Nhwc(ctx, "data_format");
    const ConvGeom g =
        MakeConvGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d_grad'");
    Tensor* dx_t = ctx.Output(GradVarName("Input"));
    Tensor* dw_t = ctx.Output(GradVarName("Filter"));
    Scratch<T> x_nchw(dev), dy_nchw(dev), dx_nchw(dev);
    const void* xb = DeviceNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw);
    const void* wb = s.In(w);
    const void* dyb = DeviceNchw<T>(dev, s.In(ctx.Input(GradVarName("Output"))), nhwc, g.n, g.m, g.OutPlane(), dy_nchw);
    void* dx_out = dx_t ? AllocateOutput<T>(ctx, dx_t, x.GetShape()) : nullptr;
    void* dx = dx_out && nhwc ? dx_nchw.Allocate(x.Numel()) : dx_out;
    void* dw = dw_t ? AllocateOutput<T>(ctx, dw_t, w.GetShape()) : nullptr;
    const int64_t cg = g.CinPerGroup(), mg = g.CoutPerGroup(), k = g.ColRows(), plane = g.OutPlane();
    if (dw && g.n == 0) Zero<T>(dev, dw, g.m * k);
    Scratch<T> col_t(dev);
    void* col = col_t.Allocate(k * plane);
    const KernelArg geo = Geometry(g.h, g.w, cg, false), steps = Steps(g.h, g.w);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const int64_t img = (n * g.c + gi * cg) * g.h.in * g.w.in, out = (n * g.m + gi * mg) * plane;
        if (dx) {
          dev.Gemm(true, false, k, plane, mg, T(1), wb, gi * mg * k, k, dyb, out, plane, T(0), col, 0, plane);
          Run<T>(dev, cl_source::conv_pool(), "col2im",
                 {KernelArg::Buffer(col), KernelArg::Buffer(dx), KernelArg(img), geo, steps}, cg * g.h.in * g.w.in);
        }
        if (dw) {
          Run<T>(dev, cl_source::conv_pool(), "im2col",
                 {KernelArg::Buffer(xb), KernelArg(img), KernelArg::Buffer(col), geo, steps}, k * plane);
          dev.Gemm(false, true, mg, k, plane, T(1), dyb, out, plane, col, 0, plane, n == 0 ? T(0) : T(1), dw,
                   gi * mg * k, k);
        }
      }
    if (dx && nhwc) DeviceNhwc<T>(dev, dx, dx_out, g.n, g.c, g.h.in * g.w.in);
  }
};

int32_t PoolMode(const PoolGeom& g) { return g.max ? 0 : (g.exclusive ? 1 : 2); }

template <typename T>
struct Pool2dKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const bool nhwc = Nhwc(ctx, "data_format");
    const PoolGeom g = MakePoolGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), "op 'pool2d'");
    Scratch<T> x_nchw(dev), y_nchw(dev);
    KernelArg xa = KernelArg::Buffer(DeviceNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw));
    const Shape ys{g.n, g.c, g.h.out, g.w.out};
    void* y = AllocateOutput<T>(ctx, ctx.Output("Out"), nhwc ? NhwcShapeOf(ys) : ys);
    void* yb = nhwc ? y_nchw.Allocate(NumElements(ys)) : y;
    Run<T>(dev, cl_source::conv_pool(), "pool_fwd",
           {xa, KernelArg::Buffer(yb), KernelArg(g.n * g.c), Geometry(g.h, g.w, g.c, g.adaptive), Steps(g.h, g.w),
            KernelArg(PoolMode(g))},
           g.n * g.c * g.h.out * g.w.out);
    if (nhwc) DeviceNhwc<T>(dev, yb, y, g.n, g.c, g.h.out * g.w.out);
  }
};

template <typename T>
struct Pool2dGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    if (!dx) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const bool nhwc = Nhwc(ctx, "data_format");
    const PoolGeom g = MakePoolGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), "op 'pool2d_grad'");
    Scratch<T> x_nchw(dev), dy_nchw(dev), dx_nchw(dev);
    KernelArg xa = KernelArg::Buffer(DeviceNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw));
    KernelArg da = KernelArg::Buffer(
        DeviceNchw<T>(dev, s.In(ctx.Input(GradVarName("Out"))), nhwc, g.n, g.c, g.h.out * g.w.out, dy_nchw));
    void* g_out = AllocateOutput<T>(ctx, dx, x.GetShape());
    void* gb = nhwc ? dx_nchw.Allocate(x.Numel()) : g_out;
    Run<T>(dev, cl_source::conv_pool(), "pool_bwd",
           {xa, da, KernelArg::Buffer(gb), KernelArg(g.n * g.c), Geometry(g.h, g.w, g.c, g.adaptive), Steps(g.h, g.w),
            KernelArg(PoolMode(g))},
           g.n * g.c * g.h.in * g.w.in);
    if (nhwc) DeviceNhwc<T>(dev, gb, g_out, g.n, g.c, g.h.in * g.w.in);
  }
};

}  // namespace

NABLA_REGISTER_OPS(conv_pool_opencl) {
  RegisterOpenClKernels<Conv2dKernel>(registrar, "conv2d", __FILE__, __LINE__);
  RegisterOpenClKernels<Conv2dGradKernel>(registrar, "conv2d_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<Pool2dKernel>(registrar, "pool2d", __FILE__, __LINE__);
  RegisterOpenClKernels<Pool2dGradKernel>(registrar, "pool2d_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
