// OpenCL C of the elementwise binary ops (elementwise_opencl.cc): the
// shared skeletons. elementwise_opencl.cc appends, for each op of its table,
// the functions <op>_out(a, b) (and <op>_dx, <op>_dy(a, b, d) for its
// gradient) followed by EW_BINARY(<op>) and EW_BINARY_GRAD(<op>), which make
// the kernels `<op>` and `<op>_grad`.

// The X and Y offsets of Out's element i for Out's dims D (at most 8,
// outermost first) and element strides XS, YS (0 along dims an operand is
// broadcast over).
void ew_offsets(long i, int rank, long8 D, long8 XS, long8 YS, long* ix, long* iy) {
  long dims[8] = {D.s0, D.s1, D.s2, D.s3, D.s4, D.s5, D.s6, D.s7};
  long xs[8] = {XS.s0, XS.s1, XS.s2, XS.s3, XS.s4, XS.s5, XS.s6, XS.s7};
  long ys[8] = {YS.s0, YS.s1, YS.s2, YS.s3, YS.s4, YS.s5, YS.s6, YS.s7};
  long rem = i, x = 0, y = 0;
  for (int k = rank - 1; k >= 0; --k) {
    long c = rem % dims[k];
    rem /= dims[k];
    x += c * xs[k];
    y += c * ys[k];
  }
  *ix = x;
  *iy = y;
}

// Out = NAME_out(X, Y) over Out's n elements.
#define EW_BINARY(NAME)                                                                                          \
  __kernel void NAME##_fwd(__global const T* x, __global const T* y, __global T* out, long n, int rank, long8 D, \
                           long8 XS, long8 YS) {                                                                 \
    long i = GID;                                                                                                \
    if (i >= n) return;                                                                                          \
    long ix, iy;                                                                                                 \
    ew_offsets(i, rank, D, XS, YS, &ix, &iy);                                                                    \
    out[i] = NAME##_out(x[ix], y[iy]);                                                                           \
  }

// Per-element gradients over Out's elements, before reduce_to sums them
// onto operands that were broadcast.
#define EW_BINARY_GRAD(NAME)                                                                                 \
  __kernel void NAME##_bwd(__global const T* x, __global const T* y, __global const T* dout, __global T* gx, \
                           __global T* gy, long n, int rank, long8 D, long8 XS, long8 YS) {                  \
    long i = GID;                                                                                            \
    if (i >= n) return;                                                                                      \
    long ix, iy;                                                                                             \
    ew_offsets(i, rank, D, XS, YS, &ix, &iy);                                                                \
    T a = x[ix], b = y[iy], d = dout[i];                                                                     \
    gx[i] = NAME##_dx(a, b, d);                                                                              \
    gy[i] = NAME##_dy(a, b, d);                                                                              \
  }

// dst = sign * src summed over the dims of D that dst does not keep
// (KEEP.sk == 0): the gradient of an operand broadcast to Out's shape. Each
// work item owns one dst element, so no atomics.
__kernel void reduce_to(__global const T* src, __global T* dst, long m, int rank, long8 D, long8 KEEP, T sign) {
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
    acc += src[off];
  }
  dst[j] = sign * acc;
}
