// OpenCL C of dropout and dropout_grad (dropout_opencl.cc). The mask comes
// drawn from the host (dropout.h), the CPU kernel's draws.

// Training: out = x * s where the mask keeps x, 0 where it drops it.
__kernel void dropout_apply(__global const T* x, __global const T* mask, __global T* out, long n, T s) {
  long i = GID;
  if (i < n) out[i] = mask[i] != (T)0 ? x[i] * s : (T)0;
}

// Inference: out = x * s.
__kernel void dropout_scale(__global const T* x, __global T* out, long n, T s) {
  long i = GID;
  if (i < n) out[i] = x[i] * s;
}

// dx = dout * mask * s.
__kernel void dropout_bwd(__global const T* dout, __global const T* mask, __global T* dx, long n, T s) {
  long i = GID;
  if (i < n) dx[i] = dout[i] * mask[i] * s;
}
