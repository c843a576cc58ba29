// OpenCL C of lookup_table and lookup_table_v2 with their gradients
// (lookup_table_opencl.cc). The ids arrive checked, as int64, with -1 for a
// padding id.

// out[i, j] = W[ids[i], j], or 0 where ids[i] is -1 (padding).
__kernel void lookup_fwd(__global const T* w, __global const long* ids, __global T* out, long n, long width) {
  long e = GID;
  if (e >= n) return;
  const long i = e / width, j = e % width;
  const long id = ids[i];
  out[e] = id < 0 ? (T)0 : w[id * width + j];
}

// dW[r, j] = the sum of dOut[i, j] over the positions i whose id is r, in
// increasing i (the CPU kernel's order, so the same bits): the positions of
// row r are pos[start[r] .. start[r + 1]). One work item per element of dW,
// so no atomics.
__kernel void lookup_bwd(__global const T* dout, __global const long* start, __global const long* pos,
                         __global T* dw, long n, long width) {
  long e = GID;
  if (e >= n) return;
  const long r = e / width, j = e % width;
  T s = (T)0;
  for (long k = start[r]; k < start[r + 1]; ++k) s += dout[pos[k] * width + j];
  dw[e] = s;
}
