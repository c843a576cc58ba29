// OpenCL C of the activations (activation_opencl.cc): the kernel skeletons
// and the math the table's expressions call. activation_opencl.cc appends,
// for each op of its table, <op>_out(x, p) and <op>_dx(v, d, p) (v is X or
// Out, whichever the grad op reads; p the op's attribute) followed by
// UNARY(<op>) and UNARY_GRAD(<op>), which make the kernels `<op>_fwd` and
// `<op>_bwd`.

#define UNARY(NAME)                                                             \
  __kernel void NAME##_fwd(__global const T* x, __global T* out, long n, T p) { \
    long i = GID;                                                               \
    if (i < n) out[i] = NAME##_out(x[i], p);                                    \
  }

#define UNARY_GRAD(NAME)                                                                               \
  __kernel void NAME##_bwd(__global const T* v, __global const T* dout, __global T* dx, long n, T p) { \
    long i = GID;                                                                                      \
    if (i < n) dx[i] = NAME##_dx(v[i], dout[i], p);                                                    \
  }

// Both branches exponentiate a non-positive number: no overflow.
T sigmoid_of(T v) {
  if (v >= (T)0) return (T)1 / ((T)1 + exp(-v));
  T e = exp(v);
  return e / ((T)1 + e);
}

// gelu exactly (erf) and with the tanh approximation, and their derivatives.
T gelu_erf(T v) { return (T)0.5 * v * ((T)1 + erf(v * (T)0.70710678118654752440)); }

T gelu_tanh(T v) { return (T)0.5 * v * ((T)1 + tanh((T)0.79788456080286535588 * (v + (T)0.044715 * v * v * v))); }

T gelu_erf_grad(T v) {
  T cdf = (T)0.5 * ((T)1 + erf(v * (T)0.70710678118654752440));
  return cdf + v * (T)0.39894228040143267794 * exp((T)-0.5 * v * v);
}

T gelu_tanh_grad(T v) {
  T t = tanh((T)0.79788456080286535588 * (v + (T)0.044715 * v * v * v));
  T du = (T)0.79788456080286535588 * ((T)1 + (T)(3 * 0.044715) * v * v);
  return (T)0.5 * ((T)1 + t) + (T)0.5 * v * ((T)1 - t * t) * du;
}
