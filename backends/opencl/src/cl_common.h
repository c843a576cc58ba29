#pragma once
// Private to the OpenCL backend: the CL headers and the status check every
// call goes through. CL_TARGET_OPENCL_VERSION=120 comes from the target's
// compile definitions, before any CL header.
#include <CL/cl.h>

#include <memory>
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/opencl/opencl.h"

namespace nabla::opencl {

// Throws kExternal "<what> failed: CL_OUT_OF_RESOURCES (-5)<context>".
[[noreturn]] void ThrowCl(cl_int status, const std::string& what, const std::string& context = "");

inline void CheckCl(cl_int status, const char* what, const std::string& context = "") {
  if (status != CL_SUCCESS) ThrowCl(status, what, context);
}

inline cl_mem AsMem(const void* p) { return static_cast<cl_mem>(const_cast<void*>(p)); }

std::string DeviceString(cl_device_id device, cl_device_info param);
std::string PlatformString(cl_platform_id platform, cl_platform_info param);

// The platform and device ids in ListPlatforms() order (index = opencl:N).
struct DeviceIds {
  cl_platform_id platform;
  cl_device_id device;
};
std::vector<DeviceIds> AllDeviceIds();

// The backend's OpenClDevice (nabla/opencl/opencl.h): a context, one
// in-order queue, the buffer pool and the program cache.
class ClDevice final : public OpenClDevice {
 public:
  // Opens device `info` (a context and an in-order queue). Prefer GetDevice.
  explicit ClDevice(const DeviceInfo& info);
  ~ClDevice() override;
  ClDevice(const ClDevice&) = delete;
  ClDevice& operator=(const ClDevice&) = delete;

  int Id() const override;
  std::string Name() const override;
  const DeviceInfo& Info() const override;
  void* Allocate(size_t bytes) override;
  void Free(void* ptr, size_t bytes) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  void CopyRegion(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) override;
  void Fill(void* dst, size_t offset, size_t bytes, const void* pattern, size_t pattern_bytes) override;
  void Synchronize() override;
  void Launch(const std::string& source, const std::string& options, const std::string& kernel,
              const std::vector<KernelArg>& args, size_t global, size_t local = 0) override;
  bool IsProgramCached(const std::string& source, const std::string& options) const override;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t a_offset,
            int64_t lda, const void* b, int64_t b_offset, int64_t ldb, float beta, void* c, int64_t c_offset,
            int64_t ldc) override;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t a_offset,
            int64_t lda, const void* b, int64_t b_offset, int64_t ldb, double beta, void* c, int64_t c_offset,
            int64_t ldc) override;
  size_t LiveBytes() const override;
  size_t PooledBytes() const override;
  void ReleasePool() override;
  // The size of live buffer `buffer` (one Allocate handed out and Free has
  // not taken back), 0 for anything else: the C table (c_table.cc) checks
  // the handles plugins on the C ABI pass before OpenCL sees them.
  size_t BufferBytes(const void* buffer) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nabla::opencl
