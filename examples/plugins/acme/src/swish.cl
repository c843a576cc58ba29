// OpenCL C of acme_swish and acme_swish_grad (swish_opencl.cc). nabla's
// prelude comes first: T (float or double), the fp64 pragma, GID.

// sigmoid(z) without exponentiating a positive number (no overflow).
T acme_sigmoid(T z) {
  if (z >= (T)0) return (T)1 / ((T)1 + exp(-z));
  const T e = exp(z);
  return e / ((T)1 + e);
}

__kernel void acme_swish(__global const T* x, __global T* out, T beta, long n) {
  long i = GID;
  if (i < n) out[i] = x[i] * acme_sigmoid(beta * x[i]);
}

// X@GRAD = Out@GRAD * (s + beta * x * s * (1 - s)), s = sigmoid(beta * x).
__kernel void acme_swish_grad(__global const T* x, __global const T* dout, __global T* dx, T beta, long n) {
  long i = GID;
  if (i < n) {
    const T s = acme_sigmoid(beta * x[i]);
    dx[i] = dout[i] * (s + beta * x[i] * s * ((T)1 - s));
  }
}
