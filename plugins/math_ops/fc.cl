// OpenCL C of fc (fc_opencl.cc): bias and activation on the product, in
// place, over Out's m * n elements (act: 0 none, 1 relu, 2 tanh, 3
// sigmoid, as fc_opencl.cc numbers them).

// Both branches exponentiate a non-positive number: no overflow.
T fc_sigmoid(T v) {
  if (v >= (T)0) return (T)1 / ((T)1 + exp(-v));
  T e = exp(v);
  return e / ((T)1 + e);
}

__kernel void fc_bias_act(__global T* out, __global const T* bias, long total, long n, int has_bias, int act) {
  long i = GID;
  if (i >= total) return;
  T v = out[i];
  if (has_bias) v = v + bias[i % n];
  if (act == 1) v = v < (T)0 ? (T)0 : v;  // NaN stays NaN, as relu keeps it
  if (act == 2) v = tanh(v);
  if (act == 3) v = fc_sigmoid(v);
  out[i] = v;
}
