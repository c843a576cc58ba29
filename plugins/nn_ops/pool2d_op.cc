// pool2d: max or average pooling over NCHW images with Paddle's ksize,
// strides, paddings (2 or 4 values), padding_algorithm, global_pooling,
// exclusive, ceil_mode and adaptive. Where Paddle and PyTorch differ at the
// edges this follows PyTorch: with ceil_mode a window that would start in
// the trailing padding is dropped, and a non-exclusive average divides by
// the window clipped to the padded input.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "conv_util.h"
#include "dnnl_glue.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

void InferPool2d(InferShapeContext& c) {
  const Shape x = c.InputShape("X");
  EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
  NABLA_ENFORCE(x.size() == 4, kInvalidArgument, c.Where(), ": X must be 4-D [N, C, H, W], but received shape ",
                ShapeToString(x));
  const bool nhwc = IsNHWC(c.Attr<std::string>("data_format"), "data_format", c.Where());
  const Shape nchw = nhwc ? NchwShapeOf(x) : x;
  const PoolGeom g = MakePoolGeom(c, nchw, c.Where());
  const Shape out{nchw[0], nchw[1], g.h.out, g.w.out};
  c.SetOutputShape("Out", nhwc ? NhwcShapeOf(out) : out);
  c.SetOutputDType("Out", c.InputDType("X"));
}

template <typename T>
void PoolForwardLoops(const PoolGeom& g, const T* x, T* y) {
  const int64_t in_plane = g.h.in * g.w.in, out_plane = g.h.out * g.w.out;
  cpu::ParallelFor(g.n * g.c, cpu::GrainForRows(in_plane + out_plane), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* src = x + p * in_plane;
      T* dst = y + p * out_plane;
      for (int64_t oy = 0; oy < g.h.out; ++oy) {
        const Window wy = WindowAt(g.h, g.adaptive, oy);
        for (int64_t ox = 0; ox < g.w.out; ++ox) {
          const Window wx = WindowAt(g.w, g.adaptive, ox);
          if (g.max) {
            T best = -std::numeric_limits<T>::infinity();
            for (int64_t iy = wy.begin; iy < wy.end; ++iy)
              for (int64_t ix = wx.begin; ix < wx.end; ++ix) best = std::max(best, src[iy * g.w.in + ix]);
            dst[oy * g.w.out + ox] = best;
          } else {
            T sum = 0;
            for (int64_t iy = wy.begin; iy < wy.end; ++iy)
              for (int64_t ix = wx.begin; ix < wx.end; ++ix) sum += src[iy * g.w.in + ix];
            const int64_t count =
                (g.exclusive || g.adaptive) ? (wy.end - wy.begin) * (wx.end - wx.begin) : wy.span * wx.span;
            dst[oy * g.w.out + ox] = count > 0 ? sum / static_cast<T>(count) : T(0);
          }
        }
      }
    }
  });
}

// Max routes each output gradient to the first maximum of its window (as
// PyTorch), found again from X; average spreads it evenly.
template <typename T>
void PoolBackwardLoops(const PoolGeom& g, const T* x, const T* dy, T* dx) {
  const int64_t in_plane = g.h.in * g.w.in, out_plane = g.h.out * g.w.out;
  cpu::ParallelFor(g.n * g.c, cpu::GrainForRows(in_plane + out_plane), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* src = x + p * in_plane;
      const T* grad = dy + p * out_plane;
      T* dst = dx + p * in_plane;
      std::fill(dst, dst + in_plane, T(0));
      for (int64_t oy = 0; oy < g.h.out; ++oy) {
        const Window wy = WindowAt(g.h, g.adaptive, oy);
        for (int64_t ox = 0; ox < g.w.out; ++ox) {
          const Window wx = WindowAt(g.w, g.adaptive, ox);
          const T d = grad[oy * g.w.out + ox];
          if (g.max) {
            int64_t at = -1;
            T best = -std::numeric_limits<T>::infinity();
            for (int64_t iy = wy.begin; iy < wy.end; ++iy)
              for (int64_t ix = wx.begin; ix < wx.end; ++ix)
                if (at < 0 || src[iy * g.w.in + ix] > best) {
                  best = src[iy * g.w.in + ix];
                  at = iy * g.w.in + ix;
                }
            if (at >= 0) dst[at] += d;
          } else {
            const int64_t count =
                (g.exclusive || g.adaptive) ? (wy.end - wy.begin) * (wx.end - wx.begin) : wy.span * wx.span;
            if (count == 0) continue;
            const T share = d / static_cast<T>(count);
            for (int64_t iy = wy.begin; iy < wy.end; ++iy)
              for (int64_t ix = wx.begin; ix < wx.end; ++ix) dst[iy * g.w.in + ix] += share;
          }
        }
      }
    }
  });
}

template <typename T>
void Pool2dKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const bool nhwc = IsNHWC(ctx.Attr<std::string>("data_format"), "data_format", "op 'pool2d'");
  const PoolGeom g = MakePoolGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), "op 'pool2d'");
  const Shape ys{g.n, g.c, g.h.out, g.w.out};
  T* y = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), nhwc ? NhwcShapeOf(ys) : ys);
  std::vector<T> xbuf, ybuf(nhwc ? static_cast<size_t>(NumElements(ys)) : 0);
  const T* px = AsNchw(x.Data<T>(), nhwc, g.n, g.c, g.h.in * g.w.in, xbuf);
  T* py = nhwc ? ybuf.data() : y;
  bool done = false;
  if constexpr (std::is_same_v<T, float>) done = DnnlPoolForward(g, px, py);
  if (!done) PoolForwardLoops<T>(g, px, py);
  if (nhwc) TransposeChannels(py, y, g.n, g.c, g.h.out * g.w.out, false);
}

template <typename T>
void Pool2dGradKernel(const ExecutionContext& ctx) {
  Tensor* dx_t = ctx.Output(GradVarName("X"));
  if (!dx_t) return;
  const Tensor& x = ctx.Input("X");
  const bool nhwc = IsNHWC(ctx.Attr<std::string>("data_format"), "data_format", "op 'pool2d_grad'");
  const PoolGeom g = MakePoolGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), "op 'pool2d_grad'");
  T* dx = dx_t->Allocate<T>(ctx.GetDevice(), x.GetShape());
  std::vector<T> xbuf, dybuf, dxbuf(nhwc ? static_cast<size_t>(x.Numel()) : 0);
  const T* px = AsNchw(x.Data<T>(), nhwc, g.n, g.c, g.h.in * g.w.in, xbuf);
  const T* pdy = AsNchw(ctx.Input(GradVarName("Out")).Data<T>(), nhwc, g.n, g.c, g.h.out * g.w.out, dybuf);
  T* pdx = nhwc ? dxbuf.data() : dx;
  bool done = false;
  if constexpr (std::is_same_v<T, float>) done = DnnlPoolBackward(g, px, pdy, pdx);
  if (!done) PoolBackwardLoops<T>(g, px, pdy, pdx);
  if (nhwc) TransposeChannels(pdx, dx, g.n, g.c, g.h.in * g.w.in, false);
}

// pool2d_grad reads X (max finds its argmax again; avg needs the shape) and
// Out@GRAD, not Out.
class Pool2dGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp("pool2d_grad", {{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

GradCheckSpec PoolCase(std::string name, Shape x, AttributeMap attrs) {
  GradCheckSpec s;
  s.name = std::move(name);
  s.inputs = {CheckInput("X", std::move(x))};
  s.outputs = {{"Out", 1}};
  s.attrs = std::move(attrs);
  return s;
}

}  // namespace

NABLA_REGISTER_OPS(pool2d) {
  using Ints = std::vector<int>;
  const std::string avg = "avg", max = "max";
  registrar.Op("pool2d", __FILE__, __LINE__)
      .Doc(
          "2-D max or average pooling over NCHW images. Out is [N, C, (H + pad_top + pad_bottom - kh) / "
          "stride_h + 1, (likewise for W)], rounding up with ceil_mode; with global_pooling one value per "
          "plane; with adaptive ksize is the output size and windows split the input evenly.")
      .Input("X", "(Tensor) images [N, C, H, W] ([N, H, W, C] with NHWC), float32 or float64")
      .Output("Out", "(Tensor) [N, C, H_out, W_out] ([N, H_out, W_out, C] with NHWC)")
      .RequiredAttr<std::string>("pooling_type", "(string, required) max or avg",
                                 [](const std::string& t) {
                                   NABLA_ENFORCE(t == "max" || t == "avg", kInvalidArgument,
                                                 "attribute pooling_type must be max or avg, but received '", t, "'");
                                 })
      .Attr<Ints>("ksize", {},
                  "(vector<int>, required unless global_pooling) window size (height, width); with adaptive, "
                  "the output size")
      .Attr<Ints>("strides", {1, 1}, "(vector<int>, default [1, 1]) the window's step (height, width)")
      .Attr<Ints>("paddings", {0, 0},
                  "(vector<int>, default [0, 0]) padding: [height, width] on both sides, or [top, bottom, left, "
                  "right]; padded cells never win a max and count in an average only when exclusive is false")
      .Attr<bool>("global_pooling", false, "(bool, default false) pool each whole plane; ksize and paddings ignored")
      .Attr<bool>("exclusive", true, "(bool, default true) an average ignores padded cells")
      .Attr<bool>("ceil_mode", false, "(bool, default false) round the output size up, keeping a last partial window")
      .Attr<bool>("adaptive", false,
                  "(bool, default false) ksize is the output size; window i spans [floor(i * H / oh), "
                  "ceil((i + 1) * H / oh))")
      .Attr<std::string>("padding_algorithm", "EXPLICIT",
                         "(string, default \"EXPLICIT\") EXPLICIT: use paddings; SAME: pad so that H_out = "
                         "ceil(H / stride); VALID: no padding",
                         [](const std::string& a) { CheckPaddingAlgorithm(a, "pool2d"); })
      .Attr<std::string>("data_format", "NCHW",
                         "(string, default \"NCHW\") layout of X and Out: NCHW or NHWC (computed as NCHW between "
                         "transposes)")
      .InferShape(InferPool2d)
      .GradMaker<Pool2dGradMaker>()
      .GradCheck(
          PoolCase("max_2x2", {2, 2, 4, 6}, {{"pooling_type", max}, {"ksize", Ints{2, 2}}, {"strides", Ints{2, 2}}}))
      .GradCheck(PoolCase("max_pad_ceil", {1, 2, 5, 5},
                          {{"pooling_type", max},
                           {"ksize", Ints{3, 3}},
                           {"strides", Ints{2, 2}},
                           {"paddings", Ints{1, 1}},
                           {"ceil_mode", true}}))
      .GradCheck(PoolCase(
          "avg_exclusive_asym_pad", {2, 1, 5, 6},
          {{"pooling_type", avg}, {"ksize", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"paddings", Ints{1, 0, 1, 1}}}))
      .GradCheck(PoolCase("avg_inclusive_ceil", {1, 2, 6, 6},
                          {{"pooling_type", avg},
                           {"ksize", Ints{3, 3}},
                           {"strides", Ints{2, 2}},
                           {"paddings", Ints{1, 1}},
                           {"exclusive", false},
                           {"ceil_mode", true}}))
      .GradCheck(
          PoolCase("avg_adaptive", {1, 2, 7, 5}, {{"pooling_type", avg}, {"ksize", Ints{3, 2}}, {"adaptive", true}}))
      .GradCheck(
          PoolCase("max_adaptive", {1, 2, 6, 7}, {{"pooling_type", max}, {"ksize", Ints{4, 3}}, {"adaptive", true}}))
      .GradCheck(PoolCase("max_nhwc_pad", {2, 5, 4, 3},
                          {{"pooling_type", max},
                           {"ksize", Ints{3, 2}},
                           {"strides", Ints{2, 2}},
                           {"paddings", Ints{1, 0}},
                           {"data_format", std::string("NHWC")}}))
      .GradCheck(PoolCase("avg_global", {2, 3, 4, 3}, {{"pooling_type", avg}, {"global_pooling", true}}));
  OpBuilder& grad = registrar.DefaultGradOp("pool2d", __FILE__, __LINE__);
  grad.Doc("Gradient of pool2d with respect to X.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "X", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  RegisterFloatKernels(registrar, "pool2d", Pool2dKernel<float>, Pool2dKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "pool2d_grad", Pool2dGradKernel<float>, Pool2dGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
