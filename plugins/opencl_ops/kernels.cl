// OpenCL C 1.2 kernels of the opencl_ops plugin, built once per process
// and device for each element type: T is float (-DT=float) or double
// (-DT=double -DNABLA_FP64). Global sizes are rounded up to whole work
// groups of 64, so every kernel guards its index against the element count.
#ifdef NABLA_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define GID ((long)get_global_id(0))

// ------------------------------------------------------------ activations

__kernel void relu_fwd(__global const T* x, __global T* out, long n) {
  long i = GID;
  if (i < n) out[i] = x[i] > (T)0 ? x[i] : (T)0;
}

__kernel void relu_bwd(__global const T* out, __global const T* dout, __global T* dx, long n) {
  long i = GID;
  if (i < n) dx[i] = out[i] > (T)0 ? dout[i] : (T)0;
}

__kernel void tanh_fwd(__global const T* x, __global T* out, long n) {
  long i = GID;
  if (i < n) out[i] = tanh(x[i]);
}

__kernel void tanh_bwd(__global const T* out, __global const T* dout, __global T* dx, long n) {
  long i = GID;
  if (i < n) dx[i] = dout[i] * ((T)1 - out[i] * out[i]);
}

// Both branches exponentiate a non-positive number: no overflow.
__kernel void sigmoid_fwd(__global const T* x, __global T* out, long n) {
  long i = GID;
  if (i >= n) return;
  T v = x[i];
  if (v >= (T)0) {
    out[i] = (T)1 / ((T)1 + exp(-v));
  } else {
    T e = exp(v);
    out[i] = e / ((T)1 + e);
  }
}

__kernel void sigmoid_bwd(__global const T* out, __global const T* dout, __global T* dx, long n) {
  long i = GID;
  if (i < n) dx[i] = dout[i] * out[i] * ((T)1 - out[i]);
}

// ------------------------------------------------------------ simple math

// gelu and leaky_relu read X in their gradients (nn_ops defines them so).
__kernel void gelu_fwd(__global const T* x, __global T* out, long n, int approximate) {
  long i = GID;
  if (i >= n) return;
  T v = x[i];
  out[i] = approximate ? (T)0.5 * v * ((T)1 + tanh((T)0.79788456080286535588 * (v + (T)0.044715 * v * v * v)))
                       : (T)0.5 * v * ((T)1 + erf(v * (T)0.70710678118654752440));
}

__kernel void gelu_bwd(__global const T* x, __global const T* dout, __global T* dx, long n, int approximate) {
  long i = GID;
  if (i >= n) return;
  T v = x[i];
  if (approximate) {
    T t = tanh((T)0.79788456080286535588 * (v + (T)0.044715 * v * v * v));
    T du = (T)0.79788456080286535588 * ((T)1 + (T)(3 * 0.044715) * v * v);
    dx[i] = dout[i] * ((T)0.5 * ((T)1 + t) + (T)0.5 * v * ((T)1 - t * t) * du);
  } else {
    T cdf = (T)0.5 * ((T)1 + erf(v * (T)0.70710678118654752440));
    dx[i] = dout[i] * (cdf + v * (T)0.39894228040143267794 * exp((T)-0.5 * v * v));
  }
}

__kernel void leaky_relu_fwd(__global const T* x, __global T* out, long n, T alpha) {
  long i = GID;
  if (i < n) out[i] = x[i] > (T)0 ? x[i] : alpha * x[i];
}

__kernel void leaky_relu_bwd(__global const T* x, __global const T* dout, __global T* dx, long n, T alpha) {
  long i = GID;
  if (i < n) dx[i] = x[i] > (T)0 ? dout[i] : alpha * dout[i];
}

__kernel void scale(__global const T* x, __global T* out, long n, T s, T b, int bias_after_scale) {
  long i = GID;
  if (i < n) out[i] = bias_after_scale ? s * x[i] + b : s * (x[i] + b);
}

__kernel void add_to(__global T* dst, __global const T* src, long n) {
  long i = GID;
  if (i < n) dst[i] += src[i];
}

// dst[i] = value[0] * factor, value a one-element device tensor.
__kernel void fill_scaled(__global T* dst, __global const T* value, long n, T factor) {
  long i = GID;
  if (i < n) dst[i] = value[0] * factor;
}

// Rows of a row-major matrix copied between buffers with different row
// strides (concat and split, and their gradients).
__kernel void copy_rows(__global const T* src, long src_offset, long src_stride, __global T* dst, long dst_offset,
                        long dst_stride, long rows, long cols) {
  long i = GID;
  if (i >= rows * cols) return;
  long r = i / cols, c = i % cols;
  dst[dst_offset + r * dst_stride + c] = src[src_offset + r * src_stride + c];
}

// ------------------------------------------------------------ broadcasting

// Out = X op Y for out's dims D (at most 8, outermost first) with element
// strides XS and YS (0 along dims an operand is broadcast over).
// op: 0 add, 1 sub, 2 mul, 3 div.
__kernel void ew_binary(__global const T* x, __global const T* y, __global T* out, long n, int rank, long8 D,
                        long8 XS, long8 YS, int op) {
  long i = GID;
  if (i >= n) return;
  long dims[8] = {D.s0, D.s1, D.s2, D.s3, D.s4, D.s5, D.s6, D.s7};
  long xs[8] = {XS.s0, XS.s1, XS.s2, XS.s3, XS.s4, XS.s5, XS.s6, XS.s7};
  long ys[8] = {YS.s0, YS.s1, YS.s2, YS.s3, YS.s4, YS.s5, YS.s6, YS.s7};
  long rem = i, ix = 0, iy = 0;
  for (int k = rank - 1; k >= 0; --k) {
    long c = rem % dims[k];
    rem /= dims[k];
    ix += c * xs[k];
    iy += c * ys[k];
  }
  T a = x[ix], b = y[iy];
  out[i] = op == 0   ? a + b
           : op == 1 ? a - b
           : op == 2 ? a * b
           : op == 3 ? a / b
           : op == 4 ? (a > b ? a : b)
           : op == 5 ? (a < b ? a : b)
                     : pow(a, b);
}

// Per-element gradients of max (op 4), min (5) and pow (6) over Out's
// elements, before reduce_to sums them onto broadcast operands; the rules
// are math_ops' (ties split evenly, pow's Y@GRAD 0 where X == 0 <= Y).
__kernel void ew_binary_grad(__global const T* x, __global const T* y, __global const T* dout, __global T* gx,
                             __global T* gy, long n, int rank, long8 D, long8 XS, long8 YS, int op) {
  long i = GID;
  if (i >= n) return;
  long dims[8] = {D.s0, D.s1, D.s2, D.s3, D.s4, D.s5, D.s6, D.s7};
  long xs[8] = {XS.s0, XS.s1, XS.s2, XS.s3, XS.s4, XS.s5, XS.s6, XS.s7};
  long ys[8] = {YS.s0, YS.s1, YS.s2, YS.s3, YS.s4, YS.s5, YS.s6, YS.s7};
  long rem = i, ix = 0, iy = 0;
  for (int k = rank - 1; k >= 0; --k) {
    long c = rem % dims[k];
    rem /= dims[k];
    ix += c * xs[k];
    iy += c * ys[k];
  }
  T a = x[ix], b = y[iy], d = dout[i];
  T shared = d / (T)2;
  if (op == 4) {
    gx[i] = a > b ? d : (a == b ? shared : (T)0);
    gy[i] = b > a ? d : (a == b ? shared : (T)0);
  } else if (op == 5) {
    gx[i] = a < b ? d : (a == b ? shared : (T)0);
    gy[i] = b < a ? d : (a == b ? shared : (T)0);
  } else {
    gx[i] = d * b * pow(a, b - (T)1);
    gy[i] = (a == (T)0 && b >= (T)0) ? (T)0 : d * pow(a, b) * log(a);
  }
}

// dst = sign * dout summed over the dims of D that dst does not keep
// (KEEP.sk == 0): the gradient of an operand broadcast to out's shape. Each
// work item owns one dst element, so no atomics.
__kernel void reduce_to(__global const T* dout, __global T* dst, long m, int rank, long8 D, long8 KEEP, T sign) {
  long j = GID;
  if (j >= m) return;
  long dims[8] = {D.s0, D.s1, D.s2, D.s3, D.s4, D.s5, D.s6, D.s7};
  long keep[8] = {KEEP.s0, KEEP.s1, KEEP.s2, KEEP.s3, KEEP.s4, KEEP.s5, KEEP.s6, KEEP.s7};
  long stride[8];
  long s = 1;
  for (int k = rank - 1; k >= 0; --k) {
    stride[k] = s;
    s *= dims[k];
  }
  long base = 0, rem = j, count = 1;
  for (int k = rank - 1; k >= 0; --k) {
    if (keep[k]) {
      base += (rem % dims[k]) * stride[k];
      rem /= dims[k];
    } else {
      count *= dims[k];
    }
  }
  T acc = (T)0;
  for (long r = 0; r < count; ++r) {
    long rr = r, off = base;
    for (int k = rank - 1; k >= 0; --k) {
      if (!keep[k]) {
        off += (rr % dims[k]) * stride[k];
        rr /= dims[k];
      }
    }
    acc += dout[off];
  }
  dst[j] = sign * acc;
}

// ------------------------------------------------------------ reductions

// One work group of 64 sums everything; out[0] = sum / divisor.
__kernel void sum_all(__global const T* x, __global T* out, long n, T divisor, __local T* scratch) {
  int lid = get_local_id(0);
  int size = get_local_size(0);
  T acc = (T)0;
  for (long i = lid; i < n; i += size) acc += x[i];
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = size / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[0] = scratch[0] / divisor;
}

// ------------------------------------------------------------ softmax

// One work item per row along the axis: [outer, dim, inner] with the row of
// item r at base + d * inner.
#define ROW_BASE(r, dim, inner) (((r) / (inner)) * (dim) * (inner) + (r) % (inner))

__kernel void softmax_fwd(__global const T* x, __global T* out, long rows, long dim, long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T m = x[base];
  for (long d = 1; d < dim; ++d) m = fmax(m, x[base + d * inner]);
  T sum = (T)0;
  for (long d = 0; d < dim; ++d) {
    T e = exp(x[base + d * inner] - m);
    out[base + d * inner] = e;
    sum += e;
  }
  T inv = (T)1 / sum;
  for (long d = 0; d < dim; ++d) out[base + d * inner] *= inv;
}

__kernel void softmax_bwd(__global const T* out, __global const T* dout, __global T* dx, long rows, long dim,
                          long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T dot = (T)0;
  for (long d = 0; d < dim; ++d) dot += out[base + d * inner] * dout[base + d * inner];
  for (long d = 0; d < dim; ++d) {
    long k = base + d * inner;
    dx[k] = out[k] * (dout[k] - dot);
  }
}

__kernel void log_softmax_fwd(__global const T* x, __global T* out, long rows, long dim, long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T m = x[base];
  for (long d = 1; d < dim; ++d) m = fmax(m, x[base + d * inner]);
  T sum = (T)0;
  for (long d = 0; d < dim; ++d) sum += exp(x[base + d * inner] - m);
  T shift = m + log(sum);
  for (long d = 0; d < dim; ++d) out[base + d * inner] = x[base + d * inner] - shift;
}

__kernel void log_softmax_bwd(__global const T* out, __global const T* dout, __global T* dx, long rows, long dim,
                              long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T sum = (T)0;
  for (long d = 0; d < dim; ++d) sum += dout[base + d * inner];
  for (long d = 0; d < dim; ++d) {
    long k = base + d * inner;
    dx[k] = dout[k] - exp(out[k]) * sum;
  }
}

// Softmax and its log-sum-exp for one row; returns lse.
T softmax_row(__global const T* x, __global T* sm, long base, long dim, long inner) {
  T m = x[base];
  for (long d = 1; d < dim; ++d) m = fmax(m, x[base + d * inner]);
  T sum = (T)0;
  for (long d = 0; d < dim; ++d) sum += exp(x[base + d * inner] - m);
  T lse = m + log(sum);
  for (long d = 0; d < dim; ++d) sm[base + d * inner] = exp(x[base + d * inner] - lse);
  return lse;
}

// Hard labels of type L; a label outside [0, dim) that is not ignore_index
// gives a NaN loss (a kernel cannot throw).
#define SWCE_HARD(SUFFIX, L)                                                                                   \
  __kernel void swce_fwd_##SUFFIX(__global const T* x, __global const L* label, __global T* sm, __global T* loss, \
                                  long rows, long dim, long inner, int ignore) {                               \
    long r = GID;                                                                                              \
    if (r >= rows) return;                                                                                     \
    long base = ROW_BASE(r, dim, inner);                                                                       \
    T lse = softmax_row(x, sm, base, dim, inner);                                                              \
    long l = (long)label[r];                                                                                   \
    if (l == ignore)                                                                                           \
      loss[r] = (T)0;                                                                                          \
    else if (l < 0 || l >= dim)                                                                                \
      loss[r] = NAN;                                                                                           \
    else                                                                                                       \
      loss[r] = lse - x[base + l * inner];                                                                     \
  }                                                                                                            \
  __kernel void swce_bwd_##SUFFIX(__global const T* sm, __global const L* label, __global const T* dloss,     \
                                  __global T* dx, long rows, long dim, long inner, int ignore) {               \
    long r = GID;                                                                                              \
    if (r >= rows) return;                                                                                     \
    long base = ROW_BASE(r, dim, inner);                                                                       \
    long l = (long)label[r];                                                                                   \
    T g = dloss[r];                                                                                            \
    for (long d = 0; d < dim; ++d) {                                                                           \
      long k = base + d * inner;                                                                               \
      dx[k] = l == ignore ? (T)0 : (l < 0 || l >= dim) ? NAN : g * (sm[k] - (d == l ? (T)1 : (T)0));          \
    }                                                                                                          \
  }

SWCE_HARD(i64, long)
SWCE_HARD(i32, int)

__kernel void swce_fwd_soft(__global const T* x, __global const T* label, __global T* sm, __global T* loss, long rows,
                            long dim, long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T lse = softmax_row(x, sm, base, dim, inner);
  T acc = (T)0;
  for (long d = 0; d < dim; ++d) acc += label[base + d * inner] * (lse - x[base + d * inner]);
  loss[r] = acc;
}

// Soft labels need not sum to one: dx = dloss * (sm * sum(label) - label).
__kernel void swce_bwd_soft(__global const T* sm, __global const T* label, __global const T* dloss, __global T* dx,
                            long rows, long dim, long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T mass = (T)0;
  for (long d = 0; d < dim; ++d) mass += label[base + d * inner];
  T g = dloss[r];
  for (long d = 0; d < dim; ++d) {
    long k = base + d * inner;
    dx[k] = g * (sm[k] * mass - label[k]);
  }
}

// ------------------------------------------------------------ optimizers

// Outputs may be their inputs (in place): each item reads its element
// before writing it.
__kernel void sgd(__global const T* p, __global const T* g, __global const T* lr, __global T* po, long n) {
  long i = GID;
  if (i < n) po[i] = p[i] - lr[0] * g[i];
}

__kernel void momentum(__global const T* p, __global const T* g, __global const T* v, __global const T* lr,
                       __global T* po, __global T* vo, long n, T mu, int nesterov, T decay, T rescale) {
  long i = GID;
  if (i >= n) return;
  T pi = p[i];
  T gi = g[i] * rescale + decay * pi;
  T vi = mu * v[i] + gi;
  vo[i] = vi;
  po[i] = nesterov ? pi - lr[0] * (gi + mu * vi) : pi - lr[0] * vi;
}

// Paddle's adam with PyTorch's epsilon placement (see nn_ops' adam_op.cc).
__kernel void adam(__global const T* p, __global const T* g, __global const T* m1, __global const T* m2,
                   __global const T* lr, __global const T* b1p, __global const T* b2p, __global T* po,
                   __global T* m1o, __global T* m2o, long n, T beta1, T beta2, T eps) {
  long i = GID;
  if (i >= n) return;
  T bc2 = sqrt((T)1 - b2p[0]);
  T lr_t = lr[0] * bc2 / ((T)1 - b1p[0]);
  T eps_t = eps * bc2;
  T gi = g[i];
  T m = beta1 * m1[i] + ((T)1 - beta1) * gi;
  T v = beta2 * m2[i] + ((T)1 - beta2) * gi * gi;
  m1o[i] = m;
  m2o[i] = v;
  po[i] = p[i] - lr_t * m / (sqrt(v) + eps_t);
}

// ------------------------------------------------------------ conv2d, pool2d, batch_norm
// Window geometry (plugins/nn_ops/conv_util.h computes it on the host): G =
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
void pool_window(long o, long in, long k, long stride, long pad_before, long pad_after, long out, int adaptive,
                 long* b, long* e, long* span) {
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

// batch_norm over X seen as [n, c, inner], one work item per channel.
// Training: the batch's mean and biased variance (two passes), moving the
// running statistics, which may be the same buffers as mean_out/var_out.
__kernel void bn_stats(__global const T* x, __global const T* mean_in, __global const T* var_in, __global T* mean_out,
                       __global T* var_out, __global T* saved_mean, __global T* saved_inv_std, long n, long c,
                       long inner, T eps, T momentum, int global_stats) {
  long ch = GID;
  if (ch >= c) return;
  T run_mean = mean_in[ch], run_var = var_in[ch];
  T mean = run_mean, var = run_var;
  if (!global_stats && n * inner > 0) {
    T sum = (T)0;
    for (long i = 0; i < n; ++i) {
      __global const T* row = x + (i * c + ch) * inner;
      T s = (T)0;
      for (long j = 0; j < inner; ++j) s += row[j];
      sum += s;
    }
    mean = sum / (T)(n * inner);
    T sq = (T)0;
    for (long i = 0; i < n; ++i) {
      __global const T* row = x + (i * c + ch) * inner;
      T s = (T)0;
      for (long j = 0; j < inner; ++j) s += (row[j] - mean) * (row[j] - mean);
      sq += s;
    }
    var = sq / (T)(n * inner);
    mean_out[ch] = momentum * run_mean + ((T)1 - momentum) * mean;
    var_out[ch] = momentum * run_var + ((T)1 - momentum) * var;
  } else {
    mean_out[ch] = run_mean;
    var_out[ch] = run_var;
  }
  saved_mean[ch] = mean;
  saved_inv_std[ch] = (T)1 / sqrt(var + eps);
}

__kernel void bn_apply(__global const T* x, __global const T* scale, __global const T* bias,
                       __global const T* saved_mean, __global const T* saved_inv_std, __global T* y, long total, long c,
                       long inner) {
  long i = GID;
  if (i >= total) return;
  long ch = (i / inner) % c;
  T a = saved_inv_std[ch] * scale[ch];
  y[i] = (x[i] - saved_mean[ch]) * a + bias[ch];
}

// Per channel: sum(dY) and sum(dY * xhat), into dbias and dscale.
__kernel void bn_grad_stats(__global const T* x, __global const T* dy, __global const T* saved_mean,
                            __global const T* saved_inv_std, __global T* dscale, __global T* dbias, long n, long c,
                            long inner) {
  long ch = GID;
  if (ch >= c) return;
  T mean = saved_mean[ch], sum_dy = (T)0, sum_dy_x = (T)0;
  for (long i = 0; i < n; ++i) {
    long base = (i * c + ch) * inner;
    T s1 = (T)0, s2 = (T)0;
    for (long j = 0; j < inner; ++j) {
      s1 += dy[base + j];
      s2 += dy[base + j] * (x[base + j] - mean);
    }
    sum_dy += s1;
    sum_dy_x += s2;
  }
  dbias[ch] = sum_dy;
  dscale[ch] = sum_dy_x * saved_inv_std[ch];
}

// dX = Scale * inv_std * (dY - (dBias + xhat * dScale) / m) in training;
// Scale * inv_std * dY with global statistics.
__kernel void bn_grad_apply(__global const T* x, __global const T* dy, __global const T* scale,
                            __global const T* saved_mean, __global const T* saved_inv_std, __global const T* dscale,
                            __global const T* dbias, __global T* dx, long total, long c, long inner, long m,
                            int global_stats) {
  long i = GID;
  if (i >= total) return;
  long ch = (i / inner) % c;
  T inv_std = saved_inv_std[ch], k = scale[ch] * inv_std;
  if (global_stats) {
    dx[i] = k * dy[i];
    return;
  }
  T xhat = (x[i] - saved_mean[ch]) * inv_std;
  dx[i] = k * (dy[i] - (dbias[ch] + xhat * dscale[ch]) / (T)m);
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
