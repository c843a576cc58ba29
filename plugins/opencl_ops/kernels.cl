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
