// conv2d (im2col + CLBlast GEMM per image and group), pool2d and
// batch_norm, with their grad ops. The geometry comes from nn_ops'
// conv_util.h, so windows are sized exactly as on the CPU.
#include "conv_util.h"
#include "nabla/plugin.h"
#include "ocl_util.h"

namespace nabla::opencl_ops {
namespace {

using nn::ConvGeom;
using nn::PoolGeom;

KernelArg Geometry(const nn::WindowAxis& h, const nn::WindowAxis& w, int64_t channels, bool adaptive) {
  return Long8({h.in, w.in, h.k, w.k, h.out, w.out, channels, adaptive ? 1 : 0});
}

KernelArg Steps(const nn::WindowAxis& h, const nn::WindowAxis& w) {
  return Long8({h.stride, w.stride, h.dilation, w.dilation, h.pad_before, w.pad_before, h.pad_after, w.pad_after});
}

template <typename T>
void* Scratch(OpenClDevice& dev, Tensor& t, int64_t n) {
  return t.Allocate(dev, DTypeOf<T>::value, {n});
}

bool Nhwc(const ExecutionContext& ctx, const char* attr) {
  return nn::IsNHWC(ctx.Attr<std::string>(attr), attr, "op '" + ctx.Op().Type() + "'");
}

// NHWC data computed as NCHW: `buf` transposed into `tmp`, or `buf` itself.
template <typename T>
const void* AsNchw(OpenClDevice& dev, const void* buf, bool nhwc, int64_t n, int64_t c, int64_t pixels, Tensor& tmp) {
  if (!nhwc) return buf;
  void* t = Scratch<T>(dev, tmp, n * c * pixels);
  Run<T>(dev, "transpose_channels",
         {KernelArg::Buffer(buf), KernelArg::Buffer(t), KernelArg(n), KernelArg(c), KernelArg(pixels), KernelArg(1)},
         n * c * pixels);
  return t;
}

// An NCHW result in `nchw` written to the NHWC output `out`.
template <typename T>
void ToNhwc(OpenClDevice& dev, const void* nchw, void* out, int64_t n, int64_t c, int64_t pixels) {
  Run<T>(dev, "transpose_channels",
         {KernelArg::Buffer(nchw), KernelArg::Buffer(out), KernelArg(n), KernelArg(c), KernelArg(pixels), KernelArg(0)},
         n * c * pixels);
}

template <typename T>
struct Conv2dKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("Input");
    const Tensor& w = ctx.Input("Filter");
    const bool nhwc = Nhwc(ctx, "data_format");
    const ConvGeom g =
        nn::MakeConvGeom(ctx, nhwc ? nn::NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d'");
    Tensor x_nchw, y_nchw;
    const void* xb = AsNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw);
    const void* wb = s.In(w);
    const Shape ys{g.n, g.m, g.h.out, g.w.out};
    void* y = Out<T>(ctx, ctx.Output("Output"), nhwc ? nn::NhwcShapeOf(ys) : ys);
    void* yb = nhwc ? Scratch<T>(dev, y_nchw, NumElements(ys)) : y;
    const int64_t cg = g.CinPerGroup(), mg = g.CoutPerGroup(), k = g.ColRows(), plane = g.OutPlane();
    Tensor col_t;
    void* col = Scratch<T>(dev, col_t, k * plane);
    const KernelArg geo = Geometry(g.h, g.w, cg, false), steps = Steps(g.h, g.w);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const int64_t x_off = (n * g.c + gi * cg) * g.h.in * g.w.in;
        Run<T>(dev, "im2col", {KernelArg::Buffer(xb), KernelArg(x_off), KernelArg::Buffer(col), geo, steps}, k * plane);
        dev.Gemm(false, false, mg, plane, k, T(1), wb, gi * mg * k, k, col, 0, plane, T(0), yb,
                 (n * g.m + gi * mg) * plane, plane);
      }
    if (nhwc) ToNhwc<T>(dev, yb, y, g.n, g.m, plane);
  }
};

// dX = col2im(W^T dY) and dW = sum over images of dY im2col(X)^T, per group.
template <typename T>
struct Conv2dGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("Input");
    const Tensor& w = ctx.Input("Filter");
    const bool nhwc = Nhwc(ctx, "data_format");
    const ConvGeom g =
        nn::MakeConvGeom(ctx, nhwc ? nn::NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d_grad'");
    Tensor* dx_t = ctx.Output(GradVarName("Input"));
    Tensor* dw_t = ctx.Output(GradVarName("Filter"));
    Tensor x_nchw, dy_nchw, dx_nchw;
    const void* xb = AsNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw);
    const void* wb = s.In(w);
    const void* dyb = AsNchw<T>(dev, s.In(ctx.Input(GradVarName("Output"))), nhwc, g.n, g.m, g.OutPlane(), dy_nchw);
    void* dx_out = dx_t ? Out<T>(ctx, dx_t, x.GetShape()) : nullptr;
    void* dx = dx_out && nhwc ? Scratch<T>(dev, dx_nchw, x.Numel()) : dx_out;
    void* dw = dw_t ? Out<T>(ctx, dw_t, w.GetShape()) : nullptr;
    const int64_t cg = g.CinPerGroup(), mg = g.CoutPerGroup(), k = g.ColRows(), plane = g.OutPlane();
    if (dw && g.n == 0) Zero<T>(dev, dw, g.m * k);
    Tensor col_t;
    void* col = Scratch<T>(dev, col_t, k * plane);
    const KernelArg geo = Geometry(g.h, g.w, cg, false), steps = Steps(g.h, g.w);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const int64_t img = (n * g.c + gi * cg) * g.h.in * g.w.in, out = (n * g.m + gi * mg) * plane;
        if (dx) {
          dev.Gemm(true, false, k, plane, mg, T(1), wb, gi * mg * k, k, dyb, out, plane, T(0), col, 0, plane);
          Run<T>(dev, "col2im", {KernelArg::Buffer(col), KernelArg::Buffer(dx), KernelArg(img), geo, steps},
                 cg * g.h.in * g.w.in);
        }
        if (dw) {
          Run<T>(dev, "im2col", {KernelArg::Buffer(xb), KernelArg(img), KernelArg::Buffer(col), geo, steps}, k * plane);
          dev.Gemm(false, true, mg, k, plane, T(1), dyb, out, plane, col, 0, plane, n == 0 ? T(0) : T(1), dw,
                   gi * mg * k, k);
        }
      }
    if (dx && nhwc) ToNhwc<T>(dev, dx, dx_out, g.n, g.c, g.h.in * g.w.in);
  }
};

int32_t PoolMode(const PoolGeom& g) { return g.max ? 0 : (g.exclusive ? 1 : 2); }

template <typename T>
struct Pool2dKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const bool nhwc = Nhwc(ctx, "data_format");
    const PoolGeom g = nn::MakePoolGeom(ctx, nhwc ? nn::NchwShapeOf(x.GetShape()) : x.GetShape(), "op 'pool2d'");
    Tensor x_nchw, y_nchw;
    KernelArg xa = KernelArg::Buffer(AsNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw));
    const Shape ys{g.n, g.c, g.h.out, g.w.out};
    void* y = Out<T>(ctx, ctx.Output("Out"), nhwc ? nn::NhwcShapeOf(ys) : ys);
    void* yb = nhwc ? Scratch<T>(dev, y_nchw, NumElements(ys)) : y;
    Run<T>(dev, "pool_fwd",
           {xa, KernelArg::Buffer(yb), KernelArg(g.n * g.c), Geometry(g.h, g.w, g.c, g.adaptive), Steps(g.h, g.w),
            KernelArg(PoolMode(g))},
           g.n * g.c * g.h.out * g.w.out);
    if (nhwc) ToNhwc<T>(dev, yb, y, g.n, g.c, g.h.out * g.w.out);
  }
};

template <typename T>
struct Pool2dGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    if (!dx) return;
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const bool nhwc = Nhwc(ctx, "data_format");
    const PoolGeom g = nn::MakePoolGeom(ctx, nhwc ? nn::NchwShapeOf(x.GetShape()) : x.GetShape(), "op 'pool2d_grad'");
    Tensor x_nchw, dy_nchw, dx_nchw;
    KernelArg xa = KernelArg::Buffer(AsNchw<T>(dev, s.In(x), nhwc, g.n, g.c, g.h.in * g.w.in, x_nchw));
    KernelArg da = KernelArg::Buffer(
        AsNchw<T>(dev, s.In(ctx.Input(GradVarName("Out"))), nhwc, g.n, g.c, g.h.out * g.w.out, dy_nchw));
    void* g_out = Out<T>(ctx, dx, x.GetShape());
    void* gb = nhwc ? Scratch<T>(dev, dx_nchw, x.Numel()) : g_out;
    Run<T>(dev, "pool_bwd",
           {xa, da, KernelArg::Buffer(gb), KernelArg(g.n * g.c), Geometry(g.h, g.w, g.c, g.adaptive), Steps(g.h, g.w),
            KernelArg(PoolMode(g))},
           g.n * g.c * g.h.in * g.w.in);
    if (nhwc) ToNhwc<T>(dev, gb, g_out, g.n, g.c, g.h.in * g.w.in);
  }
};

struct BnView {
  int64_t n, c, inner;
};

// NHWC (channels last) is [all other dims, c, 1], as on the CPU.
BnView ViewOf(const Shape& x, bool nhwc) {
  if (nhwc) {
    BnView v{1, x.back(), 1};
    for (size_t i = 0; i + 1 < x.size(); ++i) v.n *= x[i];
    return v;
  }
  BnView v{x[0], x[1], 1};
  for (size_t i = 2; i < x.size(); ++i) v.inner *= x[i];
  return v;
}

bool GlobalStats(const ExecutionContext& ctx) {
  return ctx.Attr<bool>("is_test") || ctx.Attr<bool>("use_global_stats");
}

template <typename T>
struct BatchNormKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const BnView v = ViewOf(x.GetShape(), Nhwc(ctx, "data_layout"));
    KernelArg xa = s.Arg(x), scale = s.Arg(ctx.Input("Scale")), bias = s.Arg(ctx.Input("Bias"));
    KernelArg mean_in = s.Arg(ctx.Input("Mean")), var_in = s.Arg(ctx.Input("Variance"));
    // MeanOut/VarianceOut are usually Mean/Variance themselves: the kernel
    // reads a channel's running values before it writes them.
    void* mean_out = Out<T>(ctx, ctx.Output("MeanOut"), {v.c});
    void* var_out = Out<T>(ctx, ctx.Output("VarianceOut"), {v.c});
    void* saved_mean = Out<T>(ctx, ctx.Output("SavedMean"), {v.c});
    void* saved_inv_std = Out<T>(ctx, ctx.Output("SavedVariance"), {v.c});
    void* y = Out<T>(ctx, ctx.Output("Y"), x.GetShape());
    Run<T>(dev, "bn_stats",
           {xa, mean_in, var_in, KernelArg::Buffer(mean_out), KernelArg::Buffer(var_out), KernelArg::Buffer(saved_mean),
            KernelArg::Buffer(saved_inv_std), KernelArg(v.n), KernelArg(v.c), KernelArg(v.inner),
            KernelArg(static_cast<T>(ctx.Attr<float>("epsilon"))),
            KernelArg(static_cast<T>(ctx.Attr<float>("momentum"))), KernelArg(static_cast<int32_t>(GlobalStats(ctx)))},
           v.c);
    Run<T>(dev, "bn_apply",
           {xa, scale, bias, KernelArg::Buffer(saved_mean), KernelArg::Buffer(saved_inv_std), KernelArg::Buffer(y),
            KernelArg(x.Numel()), KernelArg(v.c), KernelArg(v.inner)},
           x.Numel());
  }
};

template <typename T>
struct BatchNormGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const BnView v = ViewOf(x.GetShape(), Nhwc(ctx, "data_layout"));
    KernelArg xa = s.Arg(x), dy = s.Arg(ctx.Input(GradVarName("Y"))), scale = s.Arg(ctx.Input("Scale"));
    KernelArg mean = s.Arg(ctx.Input("SavedMean")), inv_std = s.Arg(ctx.Input("SavedVariance"));
    Tensor* dscale_t = ctx.Output(GradVarName("Scale"));
    Tensor* dbias_t = ctx.Output(GradVarName("Bias"));
    Tensor* dx_t = ctx.Output(GradVarName("X"));
    // dX needs both sums even when nobody wants dScale or dBias.
    Tensor tmp_scale, tmp_bias;
    void* dscale = dscale_t ? Out<T>(ctx, dscale_t, {v.c}) : Scratch<T>(dev, tmp_scale, v.c);
    void* dbias = dbias_t ? Out<T>(ctx, dbias_t, {v.c}) : Scratch<T>(dev, tmp_bias, v.c);
    Run<T>(dev, "bn_grad_stats",
           {xa, dy, mean, inv_std, KernelArg::Buffer(dscale), KernelArg::Buffer(dbias), KernelArg(v.n), KernelArg(v.c),
            KernelArg(v.inner)},
           v.c);
    if (!dx_t) return;
    void* dx = Out<T>(ctx, dx_t, x.GetShape());
    Run<T>(dev, "bn_grad_apply",
           {xa, dy, scale, mean, inv_std, KernelArg::Buffer(dscale), KernelArg::Buffer(dbias), KernelArg::Buffer(dx),
            KernelArg(x.Numel()), KernelArg(v.c), KernelArg(v.inner), KernelArg(v.n * v.inner),
            KernelArg(static_cast<int32_t>(GlobalStats(ctx)))},
           x.Numel());
  }
};

}  // namespace

NABLA_REGISTER_OPS(opencl_vision) {
  RegisterFloatKernels<Conv2dKernel>(registrar, "conv2d", __FILE__, __LINE__);
  RegisterFloatKernels<Conv2dGradKernel>(registrar, "conv2d_grad", __FILE__, __LINE__);
  RegisterFloatKernels<Pool2dKernel>(registrar, "pool2d", __FILE__, __LINE__);
  RegisterFloatKernels<Pool2dGradKernel>(registrar, "pool2d_grad", __FILE__, __LINE__);
  RegisterFloatKernels<BatchNormKernel>(registrar, "batch_norm", __FILE__, __LINE__);
  RegisterFloatKernels<BatchNormGradKernel>(registrar, "batch_norm_grad", __FILE__, __LINE__);
}

}  // namespace nabla::opencl_ops
