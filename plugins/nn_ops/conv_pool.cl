// OpenCL C of conv2d and pool2d (conv_pool_opencl.cc).

// Window geometry (conv_util.h computes it on the host): G =
// {in_h, in_w, k_h, k_w, out_h, out_w, channels, adaptive}, S = {stride_h,
// stride_w, dilation_h, dilation_w, pad_top, pad_left, pad_bottom, pad_right}.

// One image's (one group's) columns: col[((c * kh + i) * kw + j) * oh * ow +
// oy * ow + ox], zero where the tap falls into padding.
__kernel void im2col(__global const T* x, long x_off, __global T* col, long8 G, long8 S) {
  long i = GID;
  long ih = G.s0, iw = G.s1, kh = G.s2, kw = G.s3, oh = G.s4, ow = G.s5, channels = G.s6;
  if (i >= channels * kh * kw * oh * ow) return;
  long ox = i % ow, t = i / ow;
  long oy = t % oh;
  t /= oh;
  long kj = t % kw;
  t /= kw;
  long ki = t % kh, c = t / kh;
  long iy = oy * S.s0 - S.s4 + ki * S.s2, ix = ox * S.s1 - S.s5 + kj * S.s3;
  col[i] = (iy >= 0 && iy < ih && ix >= 0 && ix < iw) ? x[x_off + (c * ih + iy) * iw + ix] : (T)0;
}

// The adjoint of im2col, gathered per input pixel (no atomics): the sum of
// every column entry that im2col read from it.
__kernel void col2im(__global const T* col, __global T* dx, long dx_off, long8 G, long8 S) {
  long i = GID;
  long ih = G.s0, iw = G.s1, kh = G.s2, kw = G.s3, oh = G.s4, ow = G.s5, channels = G.s6;
  if (i >= channels * ih * iw) return;
  long ix = i % iw, t = i / iw;
  long iy = t % ih, c = t / ih;
  T sum = (T)0;
  for (long ki = 0; ki < kh; ++ki) {
    long ty = iy + S.s4 - ki * S.s2;
    if (ty < 0 || ty % S.s0 != 0 || ty / S.s0 >= oh) continue;
    long oy = ty / S.s0;
    for (long kj = 0; kj < kw; ++kj) {
      long tx = ix + S.s5 - kj * S.s3;
      if (tx < 0 || tx % S.s1 != 0 || tx / S.s1 >= ow) continue;
      sum += col[((c * kh + ki) * kw + kj) * oh * ow + oy * ow + tx / S.s1];
    }
  }
  dx[dx_off + i] = sum;
}

// Window o along one axis as conv_util.h's WindowAt: [*b, *e) inside the
// input, and *span for a non-exclusive average.
void pool_window(long o, long in, long k, long stride, long pad_before, long pad_after, long out, int adaptive, long* b,
                 long* e, long* span) {
  if (adaptive) {
    *b = o * in / out;
    *e = ((o + 1) * in + out - 1) / out;
    *span = *e - *b;
    return;
  }
  long start = o * stride - pad_before;
  long end = min(start + k, in + pad_after);
  *span = end - start;
  *b = max(start, 0L);
  *e = min(end, in);
}

// Pooling mode: 0 max, 1 exclusive average, 2 inclusive average.
__kernel void pool_fwd(__global const T* x, __global T* y, long planes, long8 G, long8 S, int mode) {
  long i = GID;
  long ih = G.s0, iw = G.s1, oh = G.s4, ow = G.s5;
  if (i >= planes * oh * ow) return;
  long ox = i % ow, oy = (i / ow) % oh, p = i / (oh * ow);
  long hb, he, hs, wb, we, ws;
  pool_window(oy, ih, G.s2, S.s0, S.s4, S.s6, oh, (int)G.s7, &hb, &he, &hs);
  pool_window(ox, iw, G.s3, S.s1, S.s5, S.s7, ow, (int)G.s7, &wb, &we, &ws);
  __global const T* src = x + p * ih * iw;
  if (mode == 0) {
    T best = -INFINITY;
    for (long yy = hb; yy < he; ++yy)
      for (long xx = wb; xx < we; ++xx) best = max(best, src[yy * iw + xx]);
    y[i] = best;
    return;
  }
  T sum = (T)0;
  for (long yy = hb; yy < he; ++yy)
    for (long xx = wb; xx < we; ++xx) sum += src[yy * iw + xx];
  long count = (mode == 1 || G.s7) ? (he - hb) * (we - wb) : hs * ws;
  y[i] = count > 0 ? sum / (T)count : (T)0;
}

// Gathered per input pixel: the windows that contain it (a range of outputs
// per axis; all of them when adaptive), each adding its share, or for max
// its whole gradient when this pixel is the window's first maximum.
__kernel void pool_bwd(__global const T* x, __global const T* dy, __global T* dx, long planes, long8 G, long8 S,
                       int mode) {
  long i = GID;
  long ih = G.s0, iw = G.s1, kh = G.s2, kw = G.s3, oh = G.s4, ow = G.s5;
  int adaptive = (int)G.s7;
  if (i >= planes * ih * iw) return;
  long ix = i % iw, iy = (i / iw) % ih, p = i / (ih * iw);
  __global const T* src = x + p * ih * iw;
  __global const T* grad = dy + p * oh * ow;
  long oy0 = 0, oy1 = oh, ox0 = 0, ox1 = ow;
  if (!adaptive) {
    oy0 = max(0L, (iy + S.s4 - kh + S.s0) / S.s0);
    oy1 = min(oh, (iy + S.s4) / S.s0 + 1);
    ox0 = max(0L, (ix + S.s5 - kw + S.s1) / S.s1);
    ox1 = min(ow, (ix + S.s5) / S.s1 + 1);
  }
  T sum = (T)0;
  for (long oy = oy0; oy < oy1; ++oy) {
    long hb, he, hs;
    pool_window(oy, ih, kh, S.s0, S.s4, S.s6, oh, adaptive, &hb, &he, &hs);
    if (iy < hb || iy >= he) continue;
    for (long ox = ox0; ox < ox1; ++ox) {
      long wb, we, ws;
      pool_window(ox, iw, kw, S.s1, S.s5, S.s7, ow, adaptive, &wb, &we, &ws);
      if (ix < wb || ix >= we) continue;
      T d = grad[oy * ow + ox];
      if (mode == 0) {
        long at = -1;
        T best = (T)0;
        for (long yy = hb; yy < he; ++yy)
          for (long xx = wb; xx < we; ++xx)
            if (at < 0 || src[yy * iw + xx] > best) {
              best = src[yy * iw + xx];
              at = yy * iw + xx;
            }
        if (at == iy * iw + ix) sum += d;
      } else {
        long count = (mode == 1 || adaptive) ? (he - hb) * (we - wb) : hs * ws;
        if (count > 0) sum += d / (T)count;
      }
    }
  }
  dx[i] = sum;
}

// NHWC <-> NCHW for conv2d and pool2d, which compute in NCHW: i indexes dst.
__kernel void transpose_channels(__global const T* src, __global T* dst, long n, long c, long pixels, int to_nchw) {
  long i = GID;
  if (i >= n * c * pixels) return;
  if (to_nchw) {
    long p = i % pixels, k = (i / pixels) % c, b = i / (pixels * c);
    dst[i] = src[(b * pixels + p) * c + k];
  } else {
    long k = i % c, p = (i / c) % pixels, b = i / (c * pixels);
    dst[i] = src[(b * c + k) * pixels + p];
  }
}
