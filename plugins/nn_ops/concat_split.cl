// OpenCL C of concat, concat_grad and split (concat_split_opencl.cc).

// Rows of a row-major matrix copied between buffers with different row
// strides (concat and split, and their gradients).
__kernel void copy_rows(__global const T* src, long src_offset, long src_stride, __global T* dst, long dst_offset,
                        long dst_stride, long rows, long cols) {
  long i = GID;
  if (i >= rows * cols) return;
  long r = i / cols, c = i % cols;
  dst[dst_offset + r * dst_stride + c] = src[src_offset + r * src_stride + c];
}
