// OpenCL C of sgd, momentum, adam and adamw (optimizer_opencl.cc).

// Outputs may be their inputs (in place): each item reads its element
// before writing it.
__kernel void sgd(__global const T* p, __global const T* g, __global const T* lr, __global T* po, long n) {
  long i = GID;
  if (i < n) po[i] = p[i] - lr[0] * g[i];
}

__kernel void momentum(__global const T* p, __global const T* g, __global const T* v, __global const T* lr,
                       __global T* po, __global T* vo, long n, T mu, int nesterov, T decay, T rescale) {
  long i = GID;
  if (i >= n) return;
  T pi = p[i];
  T gi = g[i] * rescale + decay * pi;
  T vi = mu * v[i] + gi;
  vo[i] = vi;
  po[i] = nesterov ? pi - lr[0] * (gi + mu * vi) : pi - lr[0] * vi;
}

// Paddle's adam with PyTorch's epsilon placement (see nn_ops' adam_op.cc);
// adamw is the same step with the rate lr * lr_ratio after Param *= 1 -
// rate * decay (adam: lr_ratio 1, decay 0).
__kernel void adam(__global const T* p, __global const T* g, __global const T* m1, __global const T* m2,
                   __global const T* lr, __global const T* b1p, __global const T* b2p, __global T* po, __global T* m1o,
                   __global T* m2o, long n, T beta1, T beta2, T eps, T lr_ratio, T decay) {
  long i = GID;
  if (i >= n) return;
  T rate = lr[0] * lr_ratio;
  T bc2 = sqrt((T)1 - b2p[0]);
  T lr_t = rate * bc2 / ((T)1 - b1p[0]);
  T eps_t = eps * bc2;
  T gi = g[i];
  T m = beta1 * m1[i] + ((T)1 - beta1) * gi;
  T v = beta2 * m2[i] + ((T)1 - beta2) * gi * gi;
  m1o[i] = m;
  m2o[i] = v;
  T pi = decay == (T)0 ? p[i] : ((T)1 - rate * decay) * p[i];
  po[i] = pi - lr_t * m / (sqrt(v) + eps_t);
}

// out[0] = in[0] * factor: adam's Beta1PowOut and Beta2PowOut.
__kernel void scale_scalar(__global T* out, __global const T* in, T factor) {
  if (GID == 0) out[0] = in[0] * factor;
}
