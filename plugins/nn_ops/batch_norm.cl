// OpenCL C of batch_norm and batch_norm_grad (batch_norm_opencl.cc).

// batch_norm over X seen as [n, c, inner], one work item per channel.
// Training: the batch's mean and biased variance (two passes), moving the
// running statistics, which may be the same buffers as mean_out/var_out.
__kernel void bn_stats(__global const T* x, __global const T* mean_in, __global const T* var_in, __global T* mean_out,
                       __global T* var_out, __global T* saved_mean, __global T* saved_inv_std, long n, long c,
                       long inner, T eps, T momentum, int global_stats) {
  long ch = GID;
  if (ch >= c) return;
  T run_mean = mean_in[ch], run_var = var_in[ch];
  T mean = run_mean, var = run_var;
  if (!global_stats && n * inner > 0) {
    T sum = (T)0;
    for (long i = 0; i < n; ++i) {
      __global const T* row = x + (i * c + ch) * inner;
      T s = (T)0;
      for (long j = 0; j < inner; ++j) s += row[j];
      sum += s;
    }
    mean = sum / (T)(n * inner);
    T sq = (T)0;
    for (long i = 0; i < n; ++i) {
      __global const T* row = x + (i * c + ch) * inner;
      T s = (T)0;
      for (long j = 0; j < inner; ++j) s += (row[j] - mean) * (row[j] - mean);
      sq += s;
    }
    var = sq / (T)(n * inner);
    mean_out[ch] = momentum * run_mean + ((T)1 - momentum) * mean;
    var_out[ch] = momentum * run_var + ((T)1 - momentum) * var;
  } else {
    mean_out[ch] = run_mean;
    var_out[ch] = run_var;
  }
  saved_mean[ch] = mean;
  saved_inv_std[ch] = (T)1 / sqrt(var + eps);
}

__kernel void bn_apply(__global const T* x, __global const T* scale, __global const T* bias,
                       __global const T* saved_mean, __global const T* saved_inv_std, __global T* y, long total, long c,
                       long inner) {
  long i = GID;
  if (i >= total) return;
  long ch = (i / inner) % c;
  T a = saved_inv_std[ch] * scale[ch];
  y[i] = (x[i] - saved_mean[ch]) * a + bias[ch];
}

// Per channel: sum(dY) and sum(dY * xhat), into dbias and dscale.
__kernel void bn_grad_stats(__global const T* x, __global const T* dy, __global const T* saved_mean,
                            __global const T* saved_inv_std, __global T* dscale, __global T* dbias, long n, long c,
                            long inner) {
  long ch = GID;
  if (ch >= c) return;
  T mean = saved_mean[ch], sum_dy = (T)0, sum_dy_x = (T)0;
  for (long i = 0; i < n; ++i) {
    long base = (i * c + ch) * inner;
    T s1 = (T)0, s2 = (T)0;
    for (long j = 0; j < inner; ++j) {
      s1 += dy[base + j];
      s2 += dy[base + j] * (x[base + j] - mean);
    }
    sum_dy += s1;
    sum_dy_x += s2;
  }
  dbias[ch] = sum_dy;
  dscale[ch] = sum_dy_x * saved_inv_std[ch];
}

// dX = Scale * inv_std * (dY - (dBias + xhat * dScale) / m) in training;
// Scale * inv_std * dY with global statistics.
__kernel void bn_grad_apply(__global const T* x, __global const T* dy, __global const T* scale,
                            __global const T* saved_mean, __global const T* saved_inv_std, __global const T* dscale,
                            __global const T* dbias, __global T* dx, long total, long c, long inner, long m,
                            int global_stats) {
  long i = GID;
  if (i >= total) return;
  long ch = (i / inner) % c;
  T inv_std = saved_inv_std[ch], k = scale[ch] * inv_std;
  if (global_stats) {
    dx[i] = k * dy[i];
    return;
  }
  T xhat = (x[i] - saved_mean[ch]) * inv_std;
  dx[i] = k * (dy[i] - (dbias[ch] + xhat * dscale[ch]) / (T)m);
}
