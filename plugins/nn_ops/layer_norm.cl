// OpenCL C of layer_norm and layer_norm_grad (layer_norm_opencl.cc). X is a
// [left, right] matrix; each row is normalized. Row statistics take one work
// item per row, the elementwise parts one per element (adjacent items read
// adjacent elements), the Scale and Bias gradients one per column: no
// atomics, so every run gives the same bits.

// mean and the biased variance of each row, in two passes (a one-pass
// E[x^2] - E[x]^2 cancels where the mean is large against the spread). The
// mean is row[0] plus the mean of row - row[0], as the CPU kernel takes it:
// the sum then adds values of the spread's size, not the mean's, and rows
// far from zero keep their digits.
__kernel void ln_stats(__global const T* x, __global T* mean, __global T* var, long left, long right) {
  long r = GID;
  if (r >= left) return;
  __global const T* row = x + r * right;
  const T x0 = right > 0 ? row[0] : (T)0;
  T s = (T)0;
  for (long j = 0; j < right; ++j) s += row[j] - x0;
  const T m = x0 + s / (T)right;
  T v = (T)0;
  for (long j = 0; j < right; ++j) {
    const T d = row[j] - m;
    v += d * d;
  }
  mean[r] = m;
  var[r] = v / (T)right;
}

// y = (x - mean) * rstd (* scale[j]) (+ bias[j]); scale and bias are read
// only where the flags say they are given.
__kernel void ln_apply(__global const T* x, __global const T* mean, __global const T* var, __global const T* scale,
                       __global const T* bias, __global T* y, long n, long right, T eps, int has_scale, int has_bias) {
  long i = GID;
  if (i >= n) return;
  const long r = i / right, j = i % right;
  T v = (x[i] - mean[r]) * ((T)1 / sqrt(var[r] + eps));
  if (has_scale) v *= scale[j];
  if (has_bias) v += bias[j];
  y[i] = v;
}

// With xhat = (x - mean) * rstd and g = dy * scale: per row, mean(g) and
// mean(g * xhat).
__kernel void ln_grad_rows(__global const T* x, __global const T* dy, __global const T* mean, __global const T* var,
                           __global const T* scale, __global T* mg, __global T* mgx, long left, long right, T eps,
                           int has_scale) {
  long r = GID;
  if (r >= left) return;
  const T m = mean[r], rstd = (T)1 / sqrt(var[r] + eps);
  T a = (T)0, b = (T)0;
  for (long j = 0; j < right; ++j) {
    const long i = r * right + j;
    const T g = has_scale ? dy[i] * scale[j] : dy[i];
    a += g;
    b += g * ((x[i] - m) * rstd);
  }
  mg[r] = a / (T)right;
  mgx[r] = b / (T)right;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), plus the partial acc
// where has_acc (AccumulateX; acc may be dx's own buffer: each item reads its
// element before it writes it).
__kernel void ln_grad_dx(__global const T* x, __global const T* dy, __global const T* mean, __global const T* var,
                         __global const T* scale, __global const T* mg, __global const T* mgx, __global const T* acc,
                         __global T* dx, long n, long right, T eps, int has_scale, int has_acc) {
  long i = GID;
  if (i >= n) return;
  const long r = i / right, j = i % right;
  const T rstd = (T)1 / sqrt(var[r] + eps);
  const T xhat = (x[i] - mean[r]) * rstd;
  const T g = has_scale ? dy[i] * scale[j] : dy[i];
  const T d = rstd * (g - mg[r] - xhat * mgx[r]);
  dx[i] = has_acc ? acc[i] + d : d;
}

// Stage 1 of the Scale and Bias gradients (sums compensated: they run over
// every row of a batch): for block b of `chunk` rows,
// ps[b * right + j] = the sum of dy * xhat over its rows, pb[...] = the sum
// of dy. A work item per (block, column), adjacent items on adjacent
// columns: a batch of many rows spreads over many work items.
__kernel void ln_grad_cols(__global const T* x, __global const T* dy, __global const T* mean, __global const T* var,
                           __global T* ps, __global T* pb, long left, long right, long chunk, long blocks, T eps,
                           int want_scale) {
  long w = GID;
  if (w >= blocks * right) return;
  const long b = w / right, j = w % right;
  T s = (T)0, bias = (T)0, cs = (T)0, cb = (T)0;
  const long end = min(left, (b + 1) * chunk);
  for (long r = b * chunk; r < end; ++r) {
    const long i = r * right + j;
    if (want_scale) nabla_kahan_add(&s, &cs, dy[i] * ((x[i] - mean[r]) * ((T)1 / sqrt(var[r] + eps))));
    nabla_kahan_add(&bias, &cb, dy[i]);
  }
  ps[w] = s;
  pb[w] = bias;
}

// Stage 2: each column's block sums added in block order.
__kernel void ln_grad_cols_join(__global const T* ps, __global const T* pb, __global T* dscale, __global T* dbias,
                                long right, long blocks, int want_scale, int want_bias) {
  long j = GID;
  if (j >= right) return;
  T s = (T)0, b = (T)0, cs = (T)0, cb = (T)0;
  for (long k = 0; k < blocks; ++k) {
    nabla_kahan_add(&s, &cs, ps[k * right + j]);
    nabla_kahan_add(&b, &cb, pb[k * right + j]);
  }
  if (want_scale) dscale[j] = s;
  if (want_bias) dbias[j] = b;
}
