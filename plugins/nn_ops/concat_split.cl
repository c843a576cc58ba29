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

// The same for elements of `width` bytes moved as bytes (int32, int64 and
// bool tensors: OpenCL kernels are built for float32 or float64 only).
__kernel void copy_rows_bytes(__global const uchar* src, long src_offset, long src_stride, __global uchar* dst,
                              long dst_offset, long dst_stride, long rows, long cols, long width) {
  long i = GID;
  long row_bytes = cols * width;
  if (i >= rows * row_bytes) return;
  long r = i / row_bytes, c = i % row_bytes;
  dst[(dst_offset + r * dst_stride) * width + c] = src[(src_offset + r * src_stride) * width + c];
}
