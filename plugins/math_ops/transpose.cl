// OpenCL C of transpose (transpose_opencl.cc).

// Out's element i = X's element at Out's coordinates through X's strides
// permuted (STEPS[k]: X's stride along the dim that is Out's dim k); D is
// Out's shape, at most 8 dims, outermost first.
__kernel void transpose(__global const T* x, __global T* out, long n, int rank, long8 D, long8 STEPS) {
  long i = GID;
  if (i >= n) return;
  long dims[8] = {D.s0, D.s1, D.s2, D.s3, D.s4, D.s5, D.s6, D.s7};
  long steps[8] = {STEPS.s0, STEPS.s1, STEPS.s2, STEPS.s3, STEPS.s4, STEPS.s5, STEPS.s6, STEPS.s7};
  long rem = i, ix = 0;
  for (int k = rank - 1; k >= 0; --k) {
    ix += (rem % dims[k]) * steps[k];
    rem /= dims[k];
  }
  out[i] = x[ix];
}
