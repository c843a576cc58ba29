// OpenCL C of sum (sum_opencl.cc).

__kernel void add_to(__global T* dst, __global const T* src, long n) {
  long i = GID;
  if (i < n) dst[i] += src[i];
}
