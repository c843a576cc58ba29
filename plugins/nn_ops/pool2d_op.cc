// pool2d: max or average pooling over NCHW images with Paddle's ksize,
// strides, paddings (2 or 4 values), padding_algorithm, global_pooling,
// exclusive, ceil_mode and adaptive. Where Paddle and PyTorch differ at the
// edges this follows PyTorch: with ceil_mode a window that would start in
// the trailing padding is dropped, and a non-exclusive average divides by
// the window clipped to the padded input.
#include <algorithm>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
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

// Windows that tile the input (k == stride, no leading padding, every
// window inside it, not adaptive), as in the CNN's 2x2 pools: there each
// output row is a pass over k input rows with no per-window bounds, and the
// kx loop unrolls where k is fixed at 2. Same operations in the same order
// as the general loops below, so the same bits, NaN and -0.0 included
// (tests/vision/pool_tiles_test.cc). The CNN's first 2x2 max pool, forward
// and backward: 1.7 ms against the general loops' 11.2 (bench/conv_bench.cc
// BM_MaxPool2dStep, one core of an AVX2-only EPYC).
bool Tiles(const PoolGeom& g) {
  if (g.adaptive) return false;
  for (const WindowAxis* a : {&g.h, &g.w})
    if (a->k != a->stride || a->pad_before != 0 || a->out * a->k > a->in) return false;
  return true;
}

template <typename T, int K>
void PoolForwardTiles(const PoolGeom& g, const T* x, T* y) {
  const int64_t kh = g.h.k, kw = K > 0 ? K : g.w.k, win = g.w.in, wout = g.w.out;
  const int64_t in_plane = g.h.in * win, out_plane = g.h.out * wout;
  const T count = static_cast<T>(kh * kw);
  cpu::ParallelFor(g.n * g.c, cpu::GrainForRows(in_plane + out_plane), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p)
      for (int64_t oy = 0; oy < g.h.out; ++oy) {
        T* dst = y + p * out_plane + oy * wout;
        std::fill(dst, dst + wout, g.max ? -std::numeric_limits<T>::infinity() : T(0));
        for (int64_t ky = 0; ky < kh; ++ky) {
          const T* row = x + p * in_plane + (oy * kh + ky) * win;
          if (g.max) {
            for (int64_t ox = 0; ox < wout; ++ox)
              for (int64_t kx = 0; kx < kw; ++kx) dst[ox] = std::max(dst[ox], row[ox * kw + kx]);
          } else {
            for (int64_t ox = 0; ox < wout; ++ox)
              for (int64_t kx = 0; kx < kw; ++kx) dst[ox] += row[ox * kw + kx];
          }
        }
        if (!g.max)
          for (int64_t ox = 0; ox < wout; ++ox) dst[ox] /= count;
      }
  });
}

// Max pooling's gradient for one tiling window: all of it to the window's
// first maximum in scan order, as the general loops route it.
template <typename T>
void FirstMaxTakes(const T* src, T* dst, int64_t corner, int64_t kh, int64_t kw, int64_t win, T grad) {
  int64_t at = corner;
  T best = src[corner];
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t kx = 0; kx < kw; ++kx) {
      const int64_t i = corner + ky * win + kx;
      if (src[i] > best) {
        best = src[i];
        at = i;
      }
    }
  dst[at] += grad;
}

// 2x2 max windows in float, four at a time with SSE2 (x86-64's baseline):
// the same comparisons in the same order as FirstMaxTakes, as masks instead
// of branches. The argmax of real data is random, so the branches
// mispredicted about half the time, and GCC does not vectorize the
// selects. Writes every cell of the windows it takes. Returns how many
// outputs it did; the caller does the rest.
int64_t MaxBackwardRow2x2(const float* r0, const float* r1, const float* grad, float* d0, float* d1, int64_t wout) {
  int64_t ox = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (; ox + 4 <= wout; ox += 4) {
    const __m128 top_lo = _mm_loadu_ps(r0 + 2 * ox), top_hi = _mm_loadu_ps(r0 + 2 * ox + 4);
    const __m128 bot_lo = _mm_loadu_ps(r1 + 2 * ox), bot_hi = _mm_loadu_ps(r1 + 2 * ox + 4);
    // a b / c d: each window's top-left, top-right, bottom-left, bottom-right.
    const __m128 a = _mm_shuffle_ps(top_lo, top_hi, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 b = _mm_shuffle_ps(top_lo, top_hi, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 c = _mm_shuffle_ps(bot_lo, bot_hi, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 d = _mm_shuffle_ps(bot_lo, bot_hi, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 tb = _mm_cmpgt_ps(b, a);
    const __m128 m1 = _mm_or_ps(_mm_and_ps(tb, b), _mm_andnot_ps(tb, a));
    const __m128 tc = _mm_cmpgt_ps(c, m1);
    const __m128 m2 = _mm_or_ps(_mm_and_ps(tc, c), _mm_andnot_ps(tc, m1));
    const __m128 td = _mm_cmpgt_ps(d, m2);
    // += into zeros, as the general loops: a -0.0 gradient lands as 0.0.
    const __m128 g = _mm_add_ps(zero, _mm_loadu_ps(grad + ox));
    const __m128 gd = _mm_and_ps(td, g);
    const __m128 gc = _mm_andnot_ps(td, _mm_and_ps(tc, g));
    const __m128 gb = _mm_andnot_ps(_mm_or_ps(tc, td), _mm_and_ps(tb, g));
    const __m128 ga = _mm_andnot_ps(_mm_or_ps(_mm_or_ps(tb, tc), td), g);
    _mm_storeu_ps(d0 + 2 * ox, _mm_unpacklo_ps(ga, gb));
    _mm_storeu_ps(d0 + 2 * ox + 4, _mm_unpackhi_ps(ga, gb));
    _mm_storeu_ps(d1 + 2 * ox, _mm_unpacklo_ps(gc, gd));
    _mm_storeu_ps(d1 + 2 * ox + 4, _mm_unpackhi_ps(gc, gd));
  }
#endif
  return ox;
}

template <typename T, int K>
void PoolBackwardTiles(const PoolGeom& g, const T* x, const T* dy, T* dx) {
  const int64_t kh = g.h.k, kw = K > 0 ? K : g.w.k, win = g.w.in, wout = g.w.out;
  const int64_t in_plane = g.h.in * win, out_plane = g.h.out * wout;
  const T count = static_cast<T>(kh * kw);
  constexpr bool kFloat2 = std::is_same_v<T, float> && K == 2;
  const bool two_by_two = kFloat2 && g.max && kh == 2;
  // 2x2 windows covering the whole input write every cell of dx themselves,
  // so dx is not zeroed first (a pass over it, a sixth of the pool's time).
  const bool writes_all = two_by_two && g.h.out * 2 == g.h.in && wout * 2 == win;
  cpu::ParallelFor(g.n * g.c, cpu::GrainForRows(in_plane + out_plane), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* src = x + p * in_plane;
      T* dst = dx + p * in_plane;
      if (!writes_all) std::fill(dst, dst + in_plane, T(0));
      for (int64_t oy = 0; oy < g.h.out; ++oy) {
        const T* grad = dy + p * out_plane + oy * wout;
        const int64_t top = oy * kh * win;
        int64_t ox = 0;
        if constexpr (kFloat2)
          if (two_by_two) ox = MaxBackwardRow2x2(src + top, src + top + win, grad, dst + top, dst + top + win, wout);
        for (; ox < wout; ++ox) {
          const int64_t corner = top + ox * kw;
          if (writes_all) {  // the SSE2 blocks' tail: dx was not zeroed
            std::fill_n(dst + corner, 2, T(0));
            std::fill_n(dst + corner + win, 2, T(0));
          }
          if (g.max) {
            FirstMaxTakes(src, dst, corner, kh, kw, win, grad[ox]);
          } else {
            const T share = grad[ox] / count;
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) dst[corner + ky * win + kx] += share;
          }
        }
      }
    }
  });
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
  if (!done) {
    if (!Tiles(g))
      PoolForwardLoops<T>(g, px, py);
    else if (g.w.k == 2)
      PoolForwardTiles<T, 2>(g, px, py);
    else
      PoolForwardTiles<T, 0>(g, px, py);
  }
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
  if (!done) {
    if (!Tiles(g))
      PoolBackwardLoops<T>(g, px, pdy, pdx);
    else if (g.w.k == 2)
      PoolBackwardTiles<T, 2>(g, px, pdy, pdx);
    else
      PoolBackwardTiles<T, 0>(g, px, pdy, pdx);
  }
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
