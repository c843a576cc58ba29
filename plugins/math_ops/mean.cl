// OpenCL C of mean and mean_grad (mean_opencl.cc).

// One work group sums everything; out[0] = sum / divisor.
__kernel void sum_all(__global const T* x, __global T* out, long n, T divisor, __local T* scratch) {
  int lid = get_local_id(0);
  int size = get_local_size(0);
  T acc = (T)0;
  for (long i = lid; i < n; i += size) acc += x[i];
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = size / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[0] = scratch[0] / divisor;
}

// dst[i] = value[0] * factor, value a one-element device tensor.
__kernel void fill_scaled(__global T* dst, __global const T* value, long n, T factor) {
  long i = GID;
  if (i < n) dst[i] = value[0] * factor;
}
