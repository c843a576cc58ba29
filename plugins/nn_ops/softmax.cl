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
  // (x - m) - log(sum): m + log(sum) first would round at x's magnitude.
  T log_sum = log(sum);
  for (long d = 0; d < dim; ++d) out[base + d * inner] = (x[base + d * inner] - m) - log_sum;
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

// Softmax of one row; returns log(sum(exp(x - m))) and sets *m to the max.
// Everything goes through x - m, never through lse = m + log(sum), which
// rounds at x's magnitude (1e-3 at x = 1e4 in float). A row of nothing (a
// zero-sized axis: rows of an empty x, whose loss is still written) reads
// nothing: x may be no buffer at all then (the C ABI passes an empty
// tensor's data as NULL), and m is never used.
T softmax_row(__global const T* x, __global T* sm, long base, long dim, long inner, T* m_out) {
  T m = dim > 0 ? x[base] : (T)0;
  for (long d = 1; d < dim; ++d) m = fmax(m, x[base + d * inner]);
  T sum = (T)0;
  for (long d = 0; d < dim; ++d) sum += exp(x[base + d * inner] - m);
  T log_sum = log(sum);
  for (long d = 0; d < dim; ++d) sm[base + d * inner] = exp((x[base + d * inner] - m) - log_sum);
  *m_out = m;
  return log_sum;
}

// Hard labels of type L; a label outside [0, dim) that is not ignore_index
// gives a NaN loss (a kernel cannot throw).
#define SWCE_HARD(SUFFIX, L)                                                                                      \
  __kernel void swce_fwd_##SUFFIX(__global const T* x, __global const L* label, __global T* sm, __global T* loss, \
                                  long rows, long dim, long inner, int ignore) {                                  \
    long r = GID;                                                                                                 \
    if (r >= rows) return;                                                                                        \
    long base = ROW_BASE(r, dim, inner);                                                                          \
    T m;                                                                                                          \
    T log_sum = softmax_row(x, sm, base, dim, inner, &m);                                                         \
    long l = (long)label[r];                                                                                      \
    if (l == ignore)                                                                                              \
      loss[r] = (T)0;                                                                                             \
    else if (l < 0 || l >= dim)                                                                                   \
      loss[r] = NAN;                                                                                              \
    else                                                                                                          \
      loss[r] = (m - x[base + l * inner]) + log_sum;                                                              \
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
  T m;
  T log_sum = softmax_row(x, sm, base, dim, inner, &m);
  T acc = (T)0;
  for (long d = 0; d < dim; ++d) acc += label[base + d * inner] * ((m - x[base + d * inner]) + log_sum);
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

// use_softmax = false: X holds probabilities; Softmax is a copy of X and the
// loss is cross_entropy's with its clipped log, log(max(p, 1e-20)), whose
// derivative is 0 where p <= 1e-20 (the CPU kernels' rule).
#define MIN_PROB ((T)1e-20)
T clipped_log(T p) { return log(fmax(p, MIN_PROB)); }
T clipped_log_grad(T p) { return p > MIN_PROB ? (T)(-1) / p : (T)0; }

#define SWCE_PROB_HARD(SUFFIX, L)                                                                                \
  __kernel void swce_prob_fwd_##SUFFIX(__global const T* x, __global const L* label, __global T* sm,              \
                                       __global T* loss, long rows, long dim, long inner, int ignore) {           \
    long r = GID;                                                                                                 \
    if (r >= rows) return;                                                                                        \
    long base = ROW_BASE(r, dim, inner);                                                                          \
    for (long d = 0; d < dim; ++d) sm[base + d * inner] = x[base + d * inner];                                    \
    long l = (long)label[r];                                                                                      \
    if (l == ignore)                                                                                              \
      loss[r] = (T)0;                                                                                             \
    else if (l < 0 || l >= dim)                                                                                   \
      loss[r] = NAN;                                                                                              \
    else                                                                                                          \
      loss[r] = -clipped_log(x[base + l * inner]);                                                                \
  }                                                                                                               \
  __kernel void swce_prob_bwd_##SUFFIX(__global const T* sm, __global const L* label, __global const T* dloss,    \
                                       __global T* dx, long rows, long dim, long inner, int ignore) {             \
    long r = GID;                                                                                                 \
    if (r >= rows) return;                                                                                        \
    long base = ROW_BASE(r, dim, inner);                                                                          \
    long l = (long)label[r];                                                                                      \
    T g = dloss[r];                                                                                               \
    for (long d = 0; d < dim; ++d) {                                                                              \
      long k = base + d * inner;                                                                                  \
      dx[k] = l == ignore ? (T)0 : (l < 0 || l >= dim) ? NAN : (d == l ? g * clipped_log_grad(sm[k]) : (T)0);     \
    }                                                                                                             \
  }

SWCE_PROB_HARD(i64, long)
SWCE_PROB_HARD(i32, int)

__kernel void swce_prob_fwd_soft(__global const T* x, __global const T* label, __global T* sm, __global T* loss,
                                 long rows, long dim, long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T acc = (T)0;
  for (long d = 0; d < dim; ++d) {
    long k = base + d * inner;
    sm[k] = x[k];
    acc -= label[k] * clipped_log(x[k]);
  }
  loss[r] = acc;
}

__kernel void swce_prob_bwd_soft(__global const T* sm, __global const T* label, __global const T* dloss,
                                 __global T* dx, long rows, long dim, long inner) {
  long r = GID;
  if (r >= rows) return;
  long base = ROW_BASE(r, dim, inner);
  T g = dloss[r];
  for (long d = 0; d < dim; ++d) {
    long k = base + d * inner;
    dx[k] = g * label[k] * clipped_log_grad(sm[k]);
  }
}
