#pragma once
// The OpenCL backend: platform and device discovery, an OpenCL device (a
// context and one in-order queue, pooled buffers, explicit copies), a
// program cache, kernel launches and GEMM through CLBlast.
//
// The backend is a device plugin (libnabla_opencl.so in lib/nabla/devices):
// the core loads it when something asks for an `opencl` device, so a CPU run
// maps neither it nor OpenCL. Op plugins' OpenCL kernels therefore must not
// link it: they reach the device through OpenClDevice below, an interface
// whose functions are all inline or virtual, so a kernel needs no symbol of
// the backend. The free functions at the end (GetDevice, ListPlatforms, ...)
// are the backend's own and only for programs that link nabla::opencl (its
// tests and benchmarks).
//
// No OpenCL header is included here: kernel plugins launch their OpenCL C
// through OpenClDevice::Launch and never touch cl_* types.
//
// Device memory: OpenClDevice::Allocate returns the buffer's cl_mem handle
// cast to void*. So Tensor::RawData() of a tensor on an OpenCL device is that
// handle (such tensors always have offset 0): pass it to Launch or Gemm as a
// buffer, never dereference it.
//
//   auto& dev = nabla::opencl::GetDevice(0);
//   void* buf = dev.Allocate(n * sizeof(float));
//   dev.Launch(kSource, "-DT=float", "scale", {KernelArg::Buffer(buf), KernelArg(2.0f), KernelArg(int64_t(n))}, n);
//   dev.CopyToHost(host, buf, n * sizeof(float));
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/export.h"

namespace nabla::opencl {

struct DeviceInfo {
  int index = 0;  // N in opencl:N, counted over every platform in order
  int platform_index = 0;
  std::string name, vendor, version, driver_version, opencl_c_version;
  std::string type;  // "cpu", "gpu", "accelerator", "other"
  uint64_t global_mem_bytes = 0;
  uint64_t max_alloc_bytes = 0;
  uint64_t local_mem_bytes = 0;
  unsigned compute_units = 0;
  size_t max_work_group_size = 0;
  bool fp64 = false;  // cl_khr_fp64: float64 kernels can run
};

struct PlatformInfo {
  std::string name, vendor, version;
  std::vector<DeviceInfo> devices;
};

// Every platform and device the ICD loader finds; empty when there is none
// (no ICD installed is not an error here). Other OpenCL failures throw.
NABLA_API std::vector<PlatformInfo> ListPlatforms();

// One kernel argument: a device buffer (what Allocate returned), a scalar,
// or the size of a __local array. Inline: kernels build them without
// linking the backend.
class KernelArg {
 public:
  enum class Kind { kBuffer, kValue, kLocal };
  KernelArg(int32_t v) : KernelArg(Kind::kValue, &v, sizeof v) {}
  KernelArg(int64_t v) : KernelArg(Kind::kValue, &v, sizeof v) {}
  KernelArg(float v) : KernelArg(Kind::kValue, &v, sizeof v) {}
  KernelArg(double v) : KernelArg(Kind::kValue, &v, sizeof v) {}
  // A vector type such as int8 (8 x int32): `bytes` raw bytes, at most 64.
  static KernelArg Raw(const void* data, size_t bytes) { return KernelArg(Kind::kValue, data, bytes); }
  static KernelArg Buffer(const void* handle) { return KernelArg(Kind::kBuffer, &handle, sizeof handle); }
  static KernelArg Local(size_t bytes) {
    KernelArg a(Kind::kLocal, nullptr, 0);
    a.size_ = bytes;
    return a;
  }

  Kind GetKind() const { return kind_; }
  size_t Size() const { return size_; }
  const void* Data() const { return data_; }

 private:
  KernelArg(Kind kind, const void* data, size_t size) : kind_(kind), size_(size), data_{} {
    NABLA_ENFORCE(size <= sizeof data_, kInvalidArgument, "an OpenCL kernel argument may be at most ", sizeof data_,
                  " bytes, but received ", size);
    if (size) std::memcpy(data_, data, size);
  }
  Kind kind_;
  size_t size_;
  alignas(16) unsigned char data_[64];
};

// An OpenCL device (opencl:N): what op kernels call. Every device whose
// Type() is DeviceType::kOpenCL is one, so a kernel registered for kOpenCL
// may static_cast its ExecutionContext's device to it (nabla/opencl/kernel.h's
// DeviceOf). Abstract and without out-of-line members, so plugins call it
// through its vtable; the backend implements it.
class OpenClDevice : public Device {
 public:
  ~OpenClDevice() override = default;

  DeviceType Type() const override { return DeviceType::kOpenCL; }
  // Name(): "opencl:0 (pthread-skylake-avx512-...)"
  virtual const DeviceInfo& Info() const = 0;

  // Allocate returns a cl_mem (as void*) of at least `bytes`, reused from
  // the pool when one of a fitting size is free. Out of device memory throws
  // an Error (kExternal) naming the size, the device and what is in use.
  // Free returns it to the pool (not to the driver). CopyFromHost and
  // CopyToHost block (the host side may be reused as soon as they return);
  // CopyOnDevice is enqueued on the in-order queue, so later commands see
  // the result.

  // Copies with byte offsets into the buffers.
  virtual void CopyRegion(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) = 0;
  // Sets `bytes` of `dst` from `offset` to repetitions of `pattern`
  // (`pattern_bytes` of 1, 2, 4, 8, ... 128).
  virtual void Fill(void* dst, size_t offset, size_t bytes, const void* pattern, size_t pattern_bytes) = 0;

  // Runs kernel `kernel` of the program built from `source` with build
  // `options` (compiled once per process and device, then cached) over
  // `global` work items in work groups of `local` (0: global is rounded up
  // to a multiple of 64 and groups are 64 wide, so PoCL compiles one work
  // group size per kernel). A failed build throws an Error carrying the
  // build log.
  virtual void Launch(const std::string& source, const std::string& options, const std::string& kernel,
                      const std::vector<KernelArg>& args, size_t global, size_t local = 0) = 0;
  // Whether the program built from (source, options) is already compiled.
  virtual bool IsProgramCached(const std::string& source, const std::string& options) const = 0;

  // Row-major C = alpha * op(A) op(B) + beta * C through CLBlast; a, b, c are
  // buffers from Allocate and the offsets count elements. m, n or k of 0 are
  // handled (k == 0 gives beta * C).
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                    int64_t a_offset, int64_t lda, const void* b, int64_t b_offset, int64_t ldb, float beta, void* c,
                    int64_t c_offset, int64_t ldc) = 0;
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                    int64_t a_offset, int64_t lda, const void* b, int64_t b_offset, int64_t ldb, double beta, void* c,
                    int64_t c_offset, int64_t ldc) = 0;

  // The pool: bytes in buffers handed out, bytes held free for reuse.
  virtual size_t LiveBytes() const = 0;
  virtual size_t PooledBytes() const = 0;
  // Returns the free buffers to the driver.
  virtual void ReleasePool() = 0;
};

// The backend's own functions (link nabla::opencl; plugins must not).
//
// The process-wide device opencl:`index`, opened on first use. Throws a
// one-line Error (kNotFound) when there is no OpenCL platform or no such
// device, listing what exists.
NABLA_API OpenClDevice& GetDevice(int index = 0);

// nabla::ResolveDevice (the device registry), kept for callers of this
// header: "opencl" and "opencl:N" are GetDevice(0) and GetDevice(N), which
// this library registers as the `opencl` device backend when it loads
// (NABLA_DEVICE_PLUGIN, nabla/plugin.h).
NABLA_API Device& ResolveDevice(const std::string& spec);

// "CL_OUT_OF_RESOURCES" for -5 and so on; "CL_UNKNOWN_ERROR(-1234)" for codes
// OpenCL does not define.
NABLA_API std::string StatusName(int code);
// CLBlast's StatusCode names ("kInsufficientMemoryC"); OpenCL's codes fall
// back to StatusName.
NABLA_API std::string ClBlastStatusName(int code);

}  // namespace nabla::opencl
