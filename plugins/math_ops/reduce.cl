// OpenCL C of reduce_sum, reduce_mean, reduce_max and reduce_min and their
// gradients (reduce_opencl.cc). X has dims D (at most 8, outermost first);
// KEEP.sk is 1 for a dim Out keeps and 0 for a reduced one.

// Strides of X's dims.
void reduce_strides(int rank, const long* dims, long* stride) {
  long s = 1;
  for (int k = rank - 1; k >= 0; --k) {
    stride[k] = s;
    s *= dims[k];
  }
}

// Out[j] folds the X elements that reduce into it, in row-major order: op 0
// sums them (times scale: 1, or 1 / count for the mean), op 1 takes the
// largest, op 2 the smallest (a NaN wins, as on the CPU; no elements give
// -inf or +inf). One work item per element of Out, so no atomics.
__kernel void reduce_fold(__global const T* x, __global T* out, long m, int rank, long8 D, long8 KEEP, int op,
                          T scale) {
  long j = GID;
  if (j >= m) return;
  long dims[8] = {D.s0, D.s1, D.s2, D.s3, D.s4, D.s5, D.s6, D.s7};
  long keep[8] = {KEEP.s0, KEEP.s1, KEEP.s2, KEEP.s3, KEEP.s4, KEEP.s5, KEEP.s6, KEEP.s7};
  long stride[8];
  reduce_strides(rank, dims, stride);
  long base = 0, rem = j, count = 1;
  for (int k = rank - 1; k >= 0; --k) {
    if (keep[k]) {
      base += (rem % dims[k]) * stride[k];
      rem /= dims[k];
    } else {
      count *= dims[k];
    }
  }
  T acc = op == 0 ? (T)0 : (op == 1 ? -INFINITY : INFINITY);
  // The sum compensated (Kahan): the CPU kernel sums float32 in double, and
  // a plain float sum over a long reduction drifts from it by about
  // count * 2^-24 relative.
  T comp = (T)0;
  for (long r = 0; r < count; ++r) {
    long rr = r, off = base;
    for (int k = rank - 1; k >= 0; --k) {
      if (!keep[k]) {
        off += (rr % dims[k]) * stride[k];
        rr /= dims[k];
      }
    }
    const T v = x[off];
    if (op == 0) {
      const T y = v - comp, t = acc + y;
      comp = isfinite(t) ? (t - acc) - y : (T)0;  // past an infinity, no correction (inf - inf is NaN)
      acc = t;
    } else if (isnan(v) || (op == 1 ? v > acc : v < acc))
      acc = isnan(acc) ? acc : v;
  }
  out[j] = op == 0 ? acc * scale : acc;
}

// The Out element X's element i reduces into.
long reduce_target(long i, int rank, const long* dims, const long* keep) {
  long rem = i, o = 0, s = 1;
  for (int k = rank - 1; k >= 0; --k) {
    const long c = rem % dims[k];
    rem /= dims[k];
    if (keep[k]) {
      o += c * s;
      s *= dims[k];
    }
  }
  return o;
}

// X@GRAD: op 0 spreads scale * Out@GRAD over the elements that were summed;
// op 1 gives Out@GRAD to every element equal to its Out (a tied extremum
// gets the whole of it, as Paddle's reduce_max_grad), 0 to the others.
__kernel void reduce_grad(__global const T* x, __global const T* out, __global const T* dout, __global T* dx, long n,
                          int rank, long8 D, long8 KEEP, int op, T scale) {
  long i = GID;
  if (i >= n) return;
  long dims[8] = {D.s0, D.s1, D.s2, D.s3, D.s4, D.s5, D.s6, D.s7};
  long keep[8] = {KEEP.s0, KEEP.s1, KEEP.s2, KEEP.s3, KEEP.s4, KEEP.s5, KEEP.s6, KEEP.s7};
  const long o = reduce_target(i, rank, dims, keep);
  dx[i] = op == 0 ? dout[o] * scale : (x[i] == out[o] ? dout[o] : (T)0);
}
