// nabla/opencl/opencl_c.h: the table through which plugins on the C ABI
// launch OpenCL kernels. The handles are the core's objects (nabla_device is
// a nabla::Device, nabla_tensor a nabla::Tensor, as core/src/c_api.cc hands
// them out); this library is built with the core, so it may rely on that.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "cl_common.h"
#include "nabla/opencl/opencl_c.h"
#include "nabla/tensor.h"

namespace nabla::opencl {
namespace {

// Turns an exception into the calling thread's C API error: nothing may
// unwind into a C plugin.
template <typename F>
int32_t Guard(const nabla_api* api, F&& f) noexcept {
  try {
    return f();
  } catch (const Error& e) {
    if (api) api->set_error(static_cast<int32_t>(e.kind()), e.what());
  } catch (const std::exception& e) {
    if (api) api->set_error(NABLA_C_RUNTIME, e.what());
  } catch (...) {
    if (api) api->set_error(NABLA_C_RUNTIME, "an exception that is not a std::exception");
  }
  return NABLA_C_ERROR;
}

OpenClDevice* AsOpenCl(nabla_device* device) {
  auto* dev = reinterpret_cast<Device*>(device);
  if (!dev || dev->Type() != DeviceType::kOpenCL) return nullptr;
  return static_cast<OpenClDevice*>(dev);
}

// The backend's device behind `device`, or an error naming what it is.
ClDevice& Expect(nabla_device* device, const char* what) {
  OpenClDevice* dev = AsOpenCl(device);
  NABLA_ENFORCE(dev != nullptr, kPreconditionNotMet, "OpenCL ", what, ": expected an OpenCL device but received ",
                device ? reinterpret_cast<Device*>(device)->Name() : std::string("NULL"));
  // Every OpenCL device is this library's ClDevice (the only implementation).
  return static_cast<ClDevice&>(*dev);
}

// Checks that `buffer` is a live buffer of `dev` holding bytes
// [offset, offset + bytes): a handle a plugin passes never reaches OpenCL
// unchecked, where a stale or foreign one would crash the driver.
void ExpectRange(const ClDevice& dev, const void* buffer, size_t offset, size_t bytes, const char* what) {
  NABLA_ENFORCE(buffer != nullptr, kInvalidArgument, "OpenCL ", what, ": expected a device buffer but received NULL");
  const size_t size = dev.BufferBytes(buffer);
  NABLA_ENFORCE(size != 0, kInvalidArgument, "OpenCL ", what, ": ", buffer, " is not a live buffer of ", dev.Name(),
                " (a tensor's data on that device, or one of buffer_allocate)");
  NABLA_ENFORCE(offset <= size && bytes <= size - offset, kOutOfRange, "OpenCL ", what, ": bytes [", offset, ", ",
                offset, " + ", bytes, ") lie outside the buffer's ", size, " bytes");
}

int32_t DeviceFp64(const nabla_api* api, nabla_device* device) {
  return Guard(api, [&]() -> int32_t {
    OpenClDevice* dev = AsOpenCl(device);
    if (!dev) return -1;
    return dev->Info().fp64 ? 1 : 0;
  });
}

int32_t Launch(const nabla_api* api, nabla_device* device, const char* source, size_t source_size, const char* options,
               const char* kernel, const nabla_opencl_arg* args, size_t arg_count, size_t global, size_t local) {
  return Guard(api, [&]() -> int32_t {
    OpenClDevice* dev = AsOpenCl(device);
    NABLA_ENFORCE(dev != nullptr, kPreconditionNotMet, "OpenCL launch of kernel '", kernel ? kernel : "(null)",
                  "': expected an OpenCL device but received ",
                  device ? reinterpret_cast<Device*>(device)->Name() : std::string("NULL"));
    NABLA_ENFORCE(source && kernel && (args || arg_count == 0), kInvalidArgument,
                  "OpenCL launch: expected a source, a kernel name and arguments but received NULL");
    std::deque<Tensor> temps;  // inputs uploaded for this launch
    std::vector<KernelArg> list;
    list.reserve(arg_count);
    for (size_t i = 0; i < arg_count; ++i) {
      const nabla_opencl_arg& a = args[i];
      switch (a.kind) {
        case NABLA_OPENCL_ARG_TENSOR: {
          NABLA_ENFORCE(a.tensor != nullptr, kInvalidArgument, "OpenCL kernel '", kernel, "', argument ", i,
                        ": a tensor argument without a tensor");
          const Tensor& t = *reinterpret_cast<const Tensor*>(a.tensor);
          NABLA_ENFORCE(t.IsInitialized(), kPreconditionNotMet, "OpenCL kernel '", kernel, "', argument ", i,
                        ": the tensor holds no data (allocate an output with tensor_allocate first)");
          if (t.GetDevice() == dev) {
            list.push_back(KernelArg::Buffer(t.RawData()));
          } else {
            temps.emplace_back();
            temps.back().CopyFrom(t, *dev);
            list.push_back(KernelArg::Buffer(temps.back().RawData()));
          }
          break;
        }
        case NABLA_OPENCL_ARG_VALUE:
          NABLA_ENFORCE(a.value != nullptr || a.size == 0, kInvalidArgument, "OpenCL kernel '", kernel, "', argument ",
                        i, ": a value argument without a value");
          list.push_back(KernelArg::Raw(a.value, a.size));
          break;
        case NABLA_OPENCL_ARG_LOCAL:
          list.push_back(KernelArg::Local(a.size));
          break;
        case NABLA_OPENCL_ARG_BUFFER: {
          const std::string what = StrCat("kernel '", kernel, "', argument ", i);
          // NULL is OpenCL's null buffer (an empty tensor's data), as
          // KernelArg::Buffer passes it on the C++ ABI.
          if (a.value) ExpectRange(static_cast<const ClDevice&>(*dev), a.value, 0, 0, what.c_str());
          list.push_back(KernelArg::Buffer(a.value));
          break;
        }
        default:
          NABLA_THROW(kInvalidArgument, "OpenCL kernel '", kernel, "', argument ", i, ": unknown kind ", a.kind,
                      " (expected 0 tensor, 1 value, 2 local or 3 buffer)");
      }
    }
    // Commands on the in-order queue run before any later reuse of the
    // temporaries' buffers, so they may go once the kernel is enqueued.
    dev->Launch(std::string(source, source_size), options ? options : "", kernel, list, global, local);
    return NABLA_C_OK;
  });
}

void* BufferAllocate(const nabla_api* api, nabla_device* device, size_t bytes) {
  void* buffer = nullptr;
  Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "buffer_allocate");
    NABLA_ENFORCE(bytes > 0, kInvalidArgument, "OpenCL buffer_allocate: expected bytes > 0 but received 0");
    buffer = dev.Allocate(bytes);
    return NABLA_C_OK;
  });
  return buffer;
}

int32_t BufferFree(const nabla_api* api, nabla_device* device, void* buffer) {
  return Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "buffer_free");
    ExpectRange(dev, buffer, 0, 0, "buffer_free");
    // The pool keys buffers by size class, which BufferBytes is.
    dev.Free(buffer, dev.BufferBytes(buffer));
    return NABLA_C_OK;
  });
}

int32_t StageTensor(const nabla_api* api, nabla_device* device, const nabla_tensor* tensor, void** buffer,
                    int32_t* owned) {
  return Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "stage_tensor");
    NABLA_ENFORCE(tensor && buffer && owned, kInvalidArgument,
                  "OpenCL stage_tensor: expected a tensor and two results but received NULL");
    *buffer = nullptr;
    *owned = 0;
    const Tensor& t = *reinterpret_cast<const Tensor*>(tensor);
    NABLA_ENFORCE(t.IsInitialized(), kPreconditionNotMet, "OpenCL stage_tensor: the tensor holds no data");
    const size_t bytes = t.Bytes();
    if (bytes == 0) return NABLA_C_OK;
    if (t.GetDevice() == &dev) {
      *buffer = t.RawData();
      return NABLA_C_OK;
    }
    void* staged = dev.Allocate(bytes);
    try {
      if (t.GetDevice()->Type() == DeviceType::kCPU) {
        dev.CopyFromHost(staged, t.RawData(), bytes);
      } else {
        std::vector<unsigned char> host(bytes);
        t.GetDevice()->CopyToHost(host.data(), t.RawData(), bytes);
        dev.CopyFromHost(staged, host.data(), bytes);
      }
    } catch (...) {
      dev.Free(staged, bytes);
      throw;
    }
    *buffer = staged;
    *owned = 1;
    return NABLA_C_OK;
  });
}

int32_t FillBuffer(const nabla_api* api, nabla_device* device, void* dst, size_t offset, size_t bytes,
                   const void* pattern, size_t pattern_bytes) {
  return Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "fill");
    NABLA_ENFORCE(pattern && pattern_bytes > 0 && pattern_bytes <= 128 && (pattern_bytes & (pattern_bytes - 1)) == 0,
                  kInvalidArgument, "OpenCL fill: expected a pattern of 1, 2, 4, ... 128 bytes but received ",
                  pattern ? pattern_bytes : 0, " bytes");
    NABLA_ENFORCE(bytes % pattern_bytes == 0 && offset % pattern_bytes == 0, kInvalidArgument, "OpenCL fill: ", bytes,
                  " bytes from offset ", offset, " are not whole ", pattern_bytes, "-byte patterns");
    if (bytes == 0) return NABLA_C_OK;
    ExpectRange(dev, dst, offset, bytes, "fill");
    dev.Fill(dst, offset, bytes, pattern, pattern_bytes);
    return NABLA_C_OK;
  });
}

int32_t CopyRegion(const nabla_api* api, nabla_device* device, void* dst, size_t dst_offset, const void* src,
                   size_t src_offset, size_t bytes) {
  return Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "copy_region");
    if (bytes == 0) return NABLA_C_OK;
    ExpectRange(dev, dst, dst_offset, bytes, "copy_region (destination)");
    ExpectRange(dev, src, src_offset, bytes, "copy_region (source)");
    NABLA_ENFORCE(
        dst != src || dst_offset == src_offset || dst_offset + bytes <= src_offset || src_offset + bytes <= dst_offset,
        kInvalidArgument, "OpenCL copy_region: the source and destination ranges overlap");
    dev.CopyRegion(dst, dst_offset, src, src_offset, bytes);
    return NABLA_C_OK;
  });
}

int32_t CopyFromHost(const nabla_api* api, nabla_device* device, void* dst, size_t dst_offset, const void* src,
                     size_t bytes) {
  return Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "copy_from_host");
    if (bytes == 0) return NABLA_C_OK;
    NABLA_ENFORCE(src != nullptr, kInvalidArgument, "OpenCL copy_from_host: expected host memory but received NULL");
    ExpectRange(dev, dst, dst_offset, bytes, "copy_from_host");
    if (dst_offset == 0) {
      dev.CopyFromHost(dst, src, bytes);
    } else {
      // Through a temporary: the device's host copies start at offset 0.
      void* tmp = dev.Allocate(bytes);
      try {
        dev.CopyFromHost(tmp, src, bytes);
        dev.CopyRegion(dst, dst_offset, tmp, 0, bytes);
      } catch (...) {
        dev.Free(tmp, bytes);
        throw;
      }
      dev.Free(tmp, bytes);
    }
    return NABLA_C_OK;
  });
}

int32_t CopyToHost(const nabla_api* api, nabla_device* device, void* dst, const void* src, size_t src_offset,
                   size_t bytes) {
  return Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "copy_to_host");
    if (bytes == 0) return NABLA_C_OK;
    NABLA_ENFORCE(dst != nullptr, kInvalidArgument, "OpenCL copy_to_host: expected host memory but received NULL");
    ExpectRange(dev, src, src_offset, bytes, "copy_to_host");
    if (src_offset == 0) {
      dev.CopyToHost(dst, src, bytes);
    } else {
      void* tmp = dev.Allocate(bytes);
      try {
        dev.CopyRegion(tmp, 0, src, src_offset, bytes);
        dev.CopyToHost(dst, tmp, bytes);
      } catch (...) {
        dev.Free(tmp, bytes);
        throw;
      }
      dev.Free(tmp, bytes);
    }
    return NABLA_C_OK;
  });
}

// The bytes a row-major rows x cols matrix with leading dimension ld takes
// from element offset on, in elements of `size` bytes; checks ld >= cols and
// ld >= 1. An empty matrix (no rows or no columns) is never read: any
// ld >= 0 will do, as the device's own Gemm takes it (matmul's empty
// batches pass ld 0).
size_t MatrixEnd(int64_t rows, int64_t cols, int64_t offset, int64_t ld, size_t size, const char* name) {
  const bool empty = rows == 0 || cols == 0;
  NABLA_ENFORCE(offset >= 0 && ld >= 0 && (empty || (ld >= cols && ld >= 1)), kInvalidArgument, "OpenCL gemm: matrix ",
                name, " has offset ", offset, " and leading dimension ", ld,
                " (expected offset >= 0 and ld >= ", std::max<int64_t>(cols, 1), ")");
  if (empty) return 0;
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(size);
  NABLA_ENFORCE(rows - 1 <= (limit - offset - cols) / ld, kOutOfRange, "OpenCL gemm: matrix ", name, " is too large");
  return static_cast<size_t>(offset + (rows - 1) * ld + cols) * size;
}

int32_t Gemm(const nabla_api* api, nabla_device* device, int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t m,
             int64_t n, int64_t k, double alpha, const void* a, int64_t a_offset, int64_t lda, const void* b,
             int64_t b_offset, int64_t ldb, double beta, void* c, int64_t c_offset, int64_t ldc) {
  return Guard(api, [&]() -> int32_t {
    ClDevice& dev = Expect(device, "gemm");
    NABLA_ENFORCE(dtype == NABLA_C_FLOAT32 || dtype == NABLA_C_FLOAT64, kInvalidArgument,
                  "OpenCL gemm: expected dtype float32 or float64 but received ", dtype);
    NABLA_ENFORCE(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "OpenCL gemm: negative size ", m, "x", n, "x", k);
    const size_t size = dtype == NABLA_C_FLOAT32 ? sizeof(float) : sizeof(double);
    const size_t a_end =
        trans_a ? MatrixEnd(k, m, a_offset, lda, size, "A") : MatrixEnd(m, k, a_offset, lda, size, "A");
    const size_t b_end =
        trans_b ? MatrixEnd(n, k, b_offset, ldb, size, "B") : MatrixEnd(k, n, b_offset, ldb, size, "B");
    const size_t c_end = MatrixEnd(m, n, c_offset, ldc, size, "C");
    if (m == 0 || n == 0) return NABLA_C_OK;
    if (k > 0) {
      ExpectRange(dev, a, 0, a_end, "gemm (A)");
      ExpectRange(dev, b, 0, b_end, "gemm (B)");
    }
    ExpectRange(dev, c, 0, c_end, "gemm (C)");
    if (dtype == NABLA_C_FLOAT32) {
      dev.Gemm(trans_a != 0, trans_b != 0, m, n, k, static_cast<float>(alpha), a, a_offset, lda, b, b_offset, ldb,
               static_cast<float>(beta), c, c_offset, ldc);
    } else {
      dev.Gemm(trans_a != 0, trans_b != 0, m, n, k, alpha, a, a_offset, lda, b, b_offset, ldb, beta, c, c_offset, ldc);
    }
    return NABLA_C_OK;
  });
}

}  // namespace
}  // namespace nabla::opencl

// The table only grows: version 1's slots stay where plugins built against
// it read them, and version 2's follow.
static_assert(offsetof(nabla_opencl_api, device_fp64) == 8);
static_assert(offsetof(nabla_opencl_api, launch) == 16);
static_assert(offsetof(nabla_opencl_api, buffer_allocate) == 24);
static_assert(offsetof(nabla_opencl_api, buffer_free) == 32);
static_assert(offsetof(nabla_opencl_api, stage_tensor) == 40);
static_assert(offsetof(nabla_opencl_api, fill) == 48);
static_assert(offsetof(nabla_opencl_api, copy_region) == 56);
static_assert(offsetof(nabla_opencl_api, copy_from_host) == 64);
static_assert(offsetof(nabla_opencl_api, copy_to_host) == 72);
static_assert(offsetof(nabla_opencl_api, gemm) == 80);
static_assert(sizeof(nabla_opencl_api) == 88);

extern "C" NABLA_API const nabla_opencl_api nabla_opencl_api_v1 = {
    NABLA_OPENCL_API_VERSION,      static_cast<uint32_t>(sizeof(nabla_opencl_api)),
    nabla::opencl::DeviceFp64,     nabla::opencl::Launch,
    nabla::opencl::BufferAllocate, nabla::opencl::BufferFree,
    nabla::opencl::StageTensor,    nabla::opencl::FillBuffer,
    nabla::opencl::CopyRegion,     nabla::opencl::CopyFromHost,
    nabla::opencl::CopyToHost,     nabla::opencl::Gemm};
