// OpenCL C of tril_triu and tril_triu_grad (tril_triu_opencl.cc): out keeps
// the element (row, col) of each matrix in the last two dims where
// col - row <= diagonal (lower) or col - row >= diagonal (upper), 0 elsewhere.
__kernel void tril_triu(__global const T* x, __global T* out, long n, long rows, long cols, long diagonal, int lower) {
  long i = GID;
  if (i >= n) return;
  const long col = i % cols, row = (i / cols) % rows;
  const int keep = lower ? col - row <= diagonal : col - row >= diagonal;
  out[i] = keep ? x[i] : (T)0;
}
