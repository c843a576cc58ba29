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

// One step of a fold: op 0 adds v to a compensated sum (the CPU kernel sums
// in double), op 1 keeps the largest, op 2 the smallest (a NaN wins, as on
// the CPU).
void fold_step(int op, T v, T* acc, T* comp) {
  if (op == 0) {
    nabla_kahan_add(acc, comp, v);
  } else if (isnan(v) || (op == 1 ? v > *acc : v < *acc)) {
    *acc = isnan(*acc) ? *acc : v;
  }
}

T fold_start(int op) { return op == 0 ? (T)0 : (op == 1 ? -INFINITY : INFINITY); }

// Stage 1: part[j * parts + p] folds the elements [p * chunk, (p + 1) *
// chunk) (in row-major order) of those that reduce into Out[j]. A work item
// per (output, part): a reduction into few outputs (a loss's mean) still
// spreads over many work items.
__kernel void reduce_part(__global const T* x, __global T* part, long m, long parts, long chunk, int rank, long8 D,
                          long8 KEEP, int op) {
  long w = GID;
  if (w >= m * parts) return;
  const long j = w / parts, p = w % parts;
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
  T acc = fold_start(op), comp = (T)0;
  const long end = min(count, (p + 1) * chunk);
  for (long r = p * chunk; r < end; ++r) {
    long rr = r, off = base;
    for (int k = rank - 1; k >= 0; --k) {
      if (!keep[k]) {
        off += (rr % dims[k]) * stride[k];
        rr /= dims[k];
      }
    }
    fold_step(op, x[off], &acc, &comp);
  }
  part[w] = acc;
}

// Stage 2: Out[j] folds its parts in order (times scale for a sum: 1, or
// 1 / count for the mean). One work item per element of Out, so no atomics
// and the same result on every run.
__kernel void reduce_join(__global const T* part, __global T* out, long m, long parts, int op, T scale) {
  long j = GID;
  if (j >= m) return;
  T acc = fold_start(op), comp = (T)0;
  for (long p = 0; p < parts; ++p) fold_step(op, part[j * parts + p], &acc, &comp);
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
