// OpenCL C of softmax, log_softmax and softmax_with_cross_entropy
// (softmax_opencl.cc).

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
#define SWCE_HARD(SUFFIX, L)                                                                                      \
  __kernel void swce_fwd_##SUFFIX(__global const T* x, __global const L* label, __global T* sm, __global T* loss, \
                                  long rows, long dim, long inner, int ignore) {                                  \
    long r = GID;                                                                                                 \
    if (r >= rows) return;                                                                                        \
    long base = ROW_BASE(r, dim, inner);                                                                          \
    T lse = softmax_row(x, sm, base, dim, inner);                                                                 \
    long l = (long)label[r];                                                                                      \
    if (l == ignore)                                                                                              \
      loss[r] = (T)0;                                                                                             \
    else if (l < 0 || l >= dim)                                                                                   \
      loss[r] = NAN;                                                                                              \
    else                                                                                                          \
      loss[r] = lse - x[base + l * inner];                                                                        \
  }                                                                                                               \
  __kernel void swce_bwd_##SUFFIX(__global const T* sm, __global const L* label, __global const T* dloss,         \
                                  __global T* dx, long rows, long dim, long inner, int ignore) {                  \
    long r = GID;                                                                                                 \
    if (r >= rows) return;                                                                                        \
    long base = ROW_BASE(r, dim, inner);                                                                          \
    long l = (long)label[r];                                                                                      \
    T g = dloss[r];                                                                                               \
    for (long d = 0; d < dim; ++d) {                                                                              \
      long k = base + d * inner;                                                                                  \
      dx[k] = l == ignore ? (T)0 : (l < 0 || l >= dim) ? NAN : g * (sm[k] - (d == l ? (T)1 : (T)0));              \
    }                                                                                                             \
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
