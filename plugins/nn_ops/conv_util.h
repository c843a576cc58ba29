#pragma once
// Window geometry shared by conv2d and pool2d (NCHW): Paddle's `paddings`
// (2 or 4 values) and `padding_algorithm` resolved to four explicit pads,
// output sizes, and the im2col/col2im pair behind the GEMM convolution.
// Private to nn_ops: its CPU kernels and its OpenCL kernels
// (conv_pool_opencl.cc) must size their windows alike. Needs
// only the core's public headers.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/types.h"

namespace nabla::nn {

// One spatial axis of a sliding window: input size, kernel, stride,
// dilation and the pads before/after; `out` is the number of windows.
struct WindowAxis {
  int64_t in = -1, k = 1, stride = 1, dilation = 1, pad_before = 0, pad_after = 0, out = -1;
};

// Two ints from an attribute that must hold exactly two positive values
// (strides, dilations, ksize).
inline std::vector<int> TwoPositive(const std::vector<int>& v, const char* attr, const std::string& where,
                                    int min_value = 1) {
  NABLA_ENFORCE(v.size() == 2, kInvalidArgument, where, ": attribute ", attr,
                " must hold 2 values (height, width), but received ", v.size());
  for (int x : v)
    NABLA_ENFORCE(x >= min_value, kInvalidArgument, where, ": attribute ", attr, " must hold values >= ", min_value,
                  ", but received ", x);
  return v;
}

inline void CheckPaddingAlgorithm(const std::string& algo, const std::string& where) {
  NABLA_ENFORCE(algo == "EXPLICIT" || algo == "SAME" || algo == "VALID", kInvalidArgument, where,
                ": attribute padding_algorithm must be EXPLICIT, SAME or VALID, but received '", algo, "'");
}

// NCHW or NHWC (Paddle's "AnyLayout" reads as NCHW); true for NHWC.
inline bool IsNHWC(const std::string& format, const char* attr, const std::string& where) {
  NABLA_ENFORCE(format == "NCHW" || format == "NHWC" || format == "AnyLayout", kInvalidArgument, where, ": attribute ",
                attr, " must be NCHW or NHWC, but received '", format, "'");
  return format == "NHWC";
}

// [N, H, W, C] as [N, C, H, W]: NHWC conv2d and pool2d compute in NCHW
// between two transposes (and say so in their docs).
inline Shape NchwShapeOf(const Shape& nhwc) { return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]}; }
inline Shape NhwcShapeOf(const Shape& nchw) { return {nchw[0], nchw[2], nchw[3], nchw[1]}; }

// dst[n][c][p] = src[n][p][c] for p over the h * w pixels (to_nchw), or the
// other way round.
template <typename T>
void TransposeChannels(const T* src, T* dst, int64_t n, int64_t c, int64_t pixels, bool to_nchw) {
  for (int64_t i = 0; i < n; ++i) {
    const T* s = src + i * c * pixels;
    T* d = dst + i * c * pixels;
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t k = 0; k < c; ++k) {
        if (to_nchw)
          d[k * pixels + p] = s[p * c + k];
        else
          d[p * c + k] = s[k * pixels + p];
      }
  }
}

// NHWC data as NCHW: a transposed copy in `buf`, or the data itself.
template <typename T>
const T* AsNchw(const T* data, bool nhwc, int64_t n, int64_t c, int64_t pixels, std::vector<T>& buf) {
  if (!nhwc) return data;
  buf.resize(static_cast<size_t>(n * c * pixels));
  TransposeChannels(data, buf.data(), n, c, pixels, true);
  return buf.data();
}

// Fills pad_before/pad_after of the height (axis 0) and width (axis 1) from
// Paddle's paddings: [ph, pw] (symmetric) or [top, bottom, left, right].
// SAME pads so that out = ceil(in / stride), the odd pad going after, with
// the dilated kernel (PyTorch's padding='same'; Paddle's conv resets the
// dilation to 1 there instead). VALID pads nothing.
inline void ResolvePaddings(const std::vector<int>& paddings, const std::string& algo, WindowAxis* axes,
                            const std::string& where) {
  CheckPaddingAlgorithm(algo, where);
  if (algo == "VALID") {
    for (int i = 0; i < 2; ++i) axes[i].pad_before = axes[i].pad_after = 0;
    return;
  }
  if (algo == "SAME") {
    for (int i = 0; i < 2; ++i) {
      WindowAxis& a = axes[i];
      if (a.in < 0) continue;
      const int64_t out = (a.in + a.stride - 1) / a.stride;
      const int64_t total = std::max<int64_t>((out - 1) * a.stride + (a.k - 1) * a.dilation + 1 - a.in, 0);
      a.pad_before = total / 2;
      a.pad_after = total - total / 2;
    }
    return;
  }
  NABLA_ENFORCE(paddings.size() == 2 || paddings.size() == 4, kInvalidArgument, where,
                ": attribute paddings must hold 2 values (height, width) or 4 (top, bottom, left, right), but "
                "received ",
                paddings.size());
  for (int p : paddings)
    NABLA_ENFORCE(p >= 0, kInvalidArgument, where, ": attribute paddings must be >= 0, but received ", p);
  if (paddings.size() == 2) {
    axes[0].pad_before = axes[0].pad_after = paddings[0];
    axes[1].pad_before = axes[1].pad_after = paddings[1];
  } else {
    axes[0].pad_before = paddings[0];
    axes[0].pad_after = paddings[1];
    axes[1].pad_before = paddings[2];
    axes[1].pad_after = paddings[3];
  }
}

// Windows along one axis. With ceil_mode a last partial window counts, but
// only if it starts inside the input or its leading pad (PyTorch's rule),
// so no window lies wholly in padding.
inline void ComputeOut(WindowAxis& a, bool ceil_mode, const char* axis_name, const std::string& where) {
  if (a.in < 0) {
    a.out = -1;
    return;
  }
  const int64_t span = a.in + a.pad_before + a.pad_after - ((a.k - 1) * a.dilation + 1);
  NABLA_ENFORCE(span >= 0, kInvalidArgument, where, ": the ", axis_name, " window (kernel ", a.k, ", dilation ",
                a.dilation, ") is larger than the padded input (", a.in, " + ", a.pad_before, " + ", a.pad_after, ")");
  a.out = (ceil_mode ? span + a.stride - 1 : span) / a.stride + 1;
  if (ceil_mode && (a.out - 1) * a.stride >= a.in + a.pad_before) --a.out;
}

// A conv2d's sizes: input [n, c, h.in, w.in], filter [m, c / groups, h.k,
// w.k], output [n, m, h.out, w.out].
struct ConvGeom {
  int64_t n = -1, c = -1, m = -1, groups = 1;
  WindowAxis h, w;
  int64_t CinPerGroup() const { return c / groups; }
  int64_t CoutPerGroup() const { return m / groups; }
  int64_t ColRows() const { return CinPerGroup() * h.k * w.k; }  // GEMM's K
  int64_t OutPlane() const { return h.out * w.out; }
};

// A pool2d's sizes: X [n, c, h.in, w.in], Out [n, c, h.out, w.out]. With
// `adaptive` only h.out/w.out matter; global pooling is a window of the
// whole plane.
struct PoolGeom {
  int64_t n = -1, c = -1;
  bool max = true, exclusive = true, adaptive = false;
  WindowAxis h, w;
};

// A conv2d's geometry from its attributes (`c` is an InferShapeContext or an
// ExecutionContext) and its Input and Filter shapes.
template <typename Ctx>
ConvGeom MakeConvGeom(const Ctx& c, const Shape& in, const Shape& filter, const std::string& where) {
  ConvGeom g;
  g.n = in[0];
  g.c = in[1];
  g.m = filter[0];
  g.groups = c.template Attr<int>("groups");
  const std::vector<int> strides = TwoPositive(c.template Attr<std::vector<int>>("strides"), "strides", where);
  const std::vector<int> dilations = TwoPositive(c.template Attr<std::vector<int>>("dilations"), "dilations", where);
  WindowAxis axes[2];
  for (int i = 0; i < 2; ++i) {
    axes[i].in = in[2 + i];
    axes[i].k = filter[2 + i];
    axes[i].stride = strides[i];
    axes[i].dilation = dilations[i];
  }
  ResolvePaddings(c.template Attr<std::vector<int>>("paddings"), c.template Attr<std::string>("padding_algorithm"),
                  axes, where);
  ComputeOut(axes[0], false, "height", where);
  ComputeOut(axes[1], false, "width", where);
  g.h = axes[0];
  g.w = axes[1];
  return g;
}

// A pool2d's geometry from its attributes and X's shape.
template <typename Ctx>
PoolGeom MakePoolGeom(const Ctx& c, const Shape& x, const std::string& where) {
  PoolGeom g;
  g.n = x[0];
  g.c = x[1];
  const std::string& type = c.template Attr<std::string>("pooling_type");
  NABLA_ENFORCE(type == "max" || type == "avg", kInvalidArgument, where,
                ": attribute pooling_type must be max or avg, but received '", type, "'");
  g.max = type == "max";
  g.exclusive = c.template Attr<bool>("exclusive");
  g.adaptive = c.template Attr<bool>("adaptive");
  const bool global = c.template Attr<bool>("global_pooling");
  const std::vector<int>& ksize = c.template Attr<std::vector<int>>("ksize");
  WindowAxis axes[2];
  for (int i = 0; i < 2; ++i) axes[i].in = x[2 + i];
  if (global) {
    // The whole plane is one window; strides and paddings do not matter.
    for (int i = 0; i < 2; ++i) {
      axes[i].k = axes[i].in;
      axes[i].out = axes[i].in < 0 ? -1 : 1;
    }
    g.adaptive = false;
  } else if (g.adaptive) {
    const std::vector<int> out = TwoPositive(ksize, "ksize", where);
    for (int i = 0; i < 2; ++i) axes[i].out = out[i];
  } else {
    const std::vector<int> k = TwoPositive(ksize, "ksize", where);
    const std::vector<int> s = TwoPositive(c.template Attr<std::vector<int>>("strides"), "strides", where);
    for (int i = 0; i < 2; ++i) {
      axes[i].k = k[i];
      axes[i].stride = s[i];
    }
    ResolvePaddings(c.template Attr<std::vector<int>>("paddings"), c.template Attr<std::string>("padding_algorithm"),
                    axes, where);
    const bool ceil_mode = c.template Attr<bool>("ceil_mode");
    ComputeOut(axes[0], ceil_mode, "height", where);
    ComputeOut(axes[1], ceil_mode, "width", where);
  }
  g.h = axes[0];
  g.w = axes[1];
  if (global && g.h.in > 0 && g.w.in > 0) {
    g.h.k = g.h.in;
    g.w.k = g.w.in;
  }
  return g;
}

// One output cell's window along an axis: [begin, end) inside the input,
// and the divisor's share (`span`) for a non-exclusive average.
struct Window {
  int64_t begin, end, span;
};

inline Window WindowAt(const WindowAxis& a, bool adaptive, int64_t o) {
  if (adaptive) {
    const int64_t b = o * a.in / a.out, e = ((o + 1) * a.in + a.out - 1) / a.out;
    return {b, e, e - b};
  }
  int64_t b = o * a.stride - a.pad_before;
  int64_t e = std::min(b + a.k, a.in + a.pad_after);
  const int64_t span = e - b;
  return {std::max<int64_t>(b, 0), std::min(e, a.in), span};
}

// im2col for one image of `channels` x [h.in, w.in]: col is
// [channels * kh * kw, h.out * w.out], zero where a tap falls into padding.
template <typename T>
void Im2Col(const T* x, int64_t channels, const WindowAxis& h, const WindowAxis& w, T* col) {
  const int64_t plane = h.out * w.out;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < h.k; ++i)
      for (int64_t j = 0; j < w.k; ++j) {
        T* row = col + ((c * h.k + i) * w.k + j) * plane;
        const T* src = x + c * h.in * w.in;
        for (int64_t oy = 0; oy < h.out; ++oy) {
          const int64_t iy = oy * h.stride - h.pad_before + i * h.dilation;
          T* dst = row + oy * w.out;
          if (iy < 0 || iy >= h.in) {
            std::fill(dst, dst + w.out, T(0));
            continue;
          }
          for (int64_t ox = 0; ox < w.out; ++ox) {
            const int64_t ix = ox * w.stride - w.pad_before + j * w.dilation;
            dst[ox] = (ix >= 0 && ix < w.in) ? src[iy * w.in + ix] : T(0);
          }
        }
      }
}

// The adjoint of Im2Col: adds every column entry back into the image dx
// (which the caller zeroes first).
template <typename T>
void Col2ImAdd(const T* col, int64_t channels, const WindowAxis& h, const WindowAxis& w, T* dx) {
  const int64_t plane = h.out * w.out;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < h.k; ++i)
      for (int64_t j = 0; j < w.k; ++j) {
        const T* row = col + ((c * h.k + i) * w.k + j) * plane;
        T* dst = dx + c * h.in * w.in;
        for (int64_t oy = 0; oy < h.out; ++oy) {
          const int64_t iy = oy * h.stride - h.pad_before + i * h.dilation;
          if (iy < 0 || iy >= h.in) continue;
          for (int64_t ox = 0; ox < w.out; ++ox) {
            const int64_t ix = ox * w.stride - w.pad_before + j * w.dilation;
            if (ix >= 0 && ix < w.in) dst[iy * w.in + ix] += row[oy * w.out + ox];
          }
        }
      }
}

}  // namespace nabla::nn
