// OpenCL C of slice and slice_grad (slice_opencl.cc). BOX is the slice's
// shape in Input's rank (at most 8 dims, outermost first), BEGIN where it
// starts in every dim, IN Input's dims.

// Input's offset of the box's element e.
long slice_offset(long e, int rank, long8 BOX, long8 BEGIN, long8 IN) {
  long box[8] = {BOX.s0, BOX.s1, BOX.s2, BOX.s3, BOX.s4, BOX.s5, BOX.s6, BOX.s7};
  long begin[8] = {BEGIN.s0, BEGIN.s1, BEGIN.s2, BEGIN.s3, BEGIN.s4, BEGIN.s5, BEGIN.s6, BEGIN.s7};
  long in[8] = {IN.s0, IN.s1, IN.s2, IN.s3, IN.s4, IN.s5, IN.s6, IN.s7};
  long rem = e, off = 0, stride = 1;
  for (int k = rank - 1; k >= 0; --k) {
    off += (begin[k] + rem % box[k]) * stride;
    rem /= box[k];
    stride *= in[k];
  }
  return off;
}

// out[e] = the box's element e of Input.
__kernel void slice_fwd(__global const T* x, __global T* out, long n, int rank, long8 BOX, long8 BEGIN, long8 IN) {
  long e = GID;
  if (e < n) out[e] = x[slice_offset(e, rank, BOX, BEGIN, IN)];
}

// Input@GRAD (zeroed first) gets Out@GRAD's element e at the box's place.
__kernel void slice_bwd(__global const T* dout, __global T* dx, long n, int rank, long8 BOX, long8 BEGIN, long8 IN) {
  long e = GID;
  if (e < n) dx[slice_offset(e, rank, BOX, BEGIN, IN)] = dout[e];
}
