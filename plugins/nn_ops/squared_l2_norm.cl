// OpenCL C of squared_l2_norm and its gradient (squared_l2_norm_opencl.cc).

// Stage 1: part[g] = the sum of x^2 over chunk g of `chunk` elements
// (compensated: the CPU kernel accumulates in double).
__kernel void sq_parts(__global const T* x, __global T* part, long n, long chunk, long parts) {
  long g = GID;
  if (g >= parts) return;
  T s = (T)0, c = (T)0;
  const long end = min(n, (g + 1) * chunk);
  for (long i = g * chunk; i < end; ++i) nabla_kahan_add(&s, &c, x[i] * x[i]);
  part[g] = s;
}

// Stage 2: out[0] = the parts summed in order (one work item: the same
// result whatever the device's scheduling).
__kernel void sq_total(__global const T* part, __global T* out, long parts) {
  if (GID != 0) return;
  T s = (T)0, c = (T)0;
  for (long g = 0; g < parts; ++g) nabla_kahan_add(&s, &c, part[g]);
  out[0] = s;
}

// dx = 2 * dout[0] * x.
__kernel void sq_grad(__global const T* x, __global const T* dout, __global T* dx, long n) {
  long i = GID;
  if (i < n) dx[i] = (T)2 * dout[0] * x[i];
}
