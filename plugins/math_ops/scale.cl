// OpenCL C of scale (scale_opencl.cc).

__kernel void scale(__global const T* x, __global T* out, long n, T s, T b, int bias_after_scale) {
  long i = GID;
  if (i < n) out[i] = bias_after_scale ? s * x[i] + b : s * (x[i] + b);
}
