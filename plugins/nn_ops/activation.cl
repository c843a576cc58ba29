// OpenCL C of the activations (activation_opencl.cc): the math the table's
// expressions call. nabla/opencl/unary.h appends the kernel skeletons and,
// for each op of the table, its functions and kernels.

// Both branches exponentiate a non-positive number: no overflow.
T sigmoid_of(T v) {
  if (v >= (T)0) return (T)1 / ((T)1 + exp(-v));
  T e = exp(v);
  return e / ((T)1 + e);
}

// gelu exactly (erf) and with the tanh approximation, and their derivatives.
T gelu_erf(T v) { return (T)0.5 * v * ((T)1 + erf(v * (T)0.70710678118654752440)); }

// The tanh form through the logistic, (1 + tanh u) / 2 = 1 / (1 + e^-2u),
// as the CPU computes it: PoCL's float tanh stops at 1 - 2^-24, and
// gelu_tanh_grad's (1 - t^2) times v du, which grows as v^3, then gave
// 1.0004 at v = 40 (and -4e-4 at -40) where the derivative is 1 (and 0).
T gelu_tanh_cdf(T v) {
  return (T)1 / ((T)1 + exp((T)-2 * (T)0.79788456080286535588 * (v + (T)0.044715 * v * v * v)));
}

T gelu_tanh(T v) { return v * gelu_tanh_cdf(v); }

T gelu_erf_grad(T v) {
  T cdf = (T)0.5 * ((T)1 + erf(v * (T)0.70710678118654752440));
  return cdf + v * (T)0.39894228040143267794 * exp((T)-0.5 * v * v);
}

// (1 + tanh u) / 2 = c and (1 - tanh^2 u) / 2 = 2 c (1 - c).
T gelu_tanh_grad(T v) {
  T c = gelu_tanh_cdf(v);
  T du = (T)0.79788456080286535588 * ((T)1 + (T)(3 * 0.044715) * v * v);
  return c + (T)2 * v * c * ((T)1 - c) * du;
}

// fmin / fmax answer the other operand for a NaN: a clamp through them turned
// NaN into a bound, where the CPU's kernels (and PyTorch) keep NaN.
T clamp_keep_nan(T v, T lo, T hi) { return isnan(v) ? v : fmin(fmax(v, lo), hi); }

// log(1 + e^v) as max(v, 0) + log1p(e^-|v|): exponentiates a non-positive
// number only, so no overflow for large |v| and no cancellation for v << 0.
T softplus_of(T v) { return fmax(v, (T)0) + log1p(exp(-fabs(v))); }

// d/dv of v * sigmoid(beta v): s + beta v s (1 - s).
T swish_grad(T v, T beta) {
  T s = sigmoid_of(beta * v);
  return s + beta * v * s * ((T)1 - s);
}
