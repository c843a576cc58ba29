// The OpenCL device: one context and one in-order queue, so commands run in
// the order kernels enqueue them and an op's outputs are ready for the next
// op without events. Buffers come from a pool of size classes; programs are
// compiled once per (source, options) and kernels once per name.
#include <clblast.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "cl_common.h"

namespace nabla::opencl {

namespace {

constexpr size_t kDefaultLocal = 64;

// Size classes: 256 bytes, then four steps per power of two, so a reused
// buffer wastes at most a quarter and the same shapes hit the same class
// every step.
size_t SizeClass(size_t bytes) {
  if (bytes <= 256) return 256;
  size_t p = 256;
  while (p < bytes) p <<= 1;
  size_t step = p / 8;  // p/2 .. p in four steps of p/8
  size_t c = p / 2;
  while (c < bytes) c += step;
  return c;
}

std::string MiB(uint64_t bytes) { return StrCat(bytes / (1024 * 1024), " MiB"); }

}  // namespace

struct ClDevice::Impl {
  DeviceInfo info;
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  size_t local = kDefaultLocal;

  mutable std::mutex mutex;            // the pool, the caches, and argument setting on cached kernels
  std::multimap<size_t, cl_mem> pool;  // free buffers by size class
  size_t live_bytes = 0, pooled_bytes = 0;
  std::unordered_map<const void*, size_t> live;          // buffers handed out, by handle: their size class
  std::unordered_map<std::string, cl_program> programs;  // options + '\n' + source
  std::map<std::pair<cl_program, std::string>, cl_kernel> kernels;

  std::string Where() const { return StrCat(" on opencl:", info.index, " (", info.name, ")"); }

  void DrainPool() {
    for (auto& [size, mem] : pool) clReleaseMemObject(mem);
    pool.clear();
    pooled_bytes = 0;
  }

  cl_program Program(const std::string& source, const std::string& options) {
    std::string key = options + '\n' + source;
    auto it = programs.find(key);
    if (it != programs.end()) return it->second;
    const char* text = source.c_str();
    size_t length = source.size();
    cl_int status = CL_SUCCESS;
    cl_program program = clCreateProgramWithSource(context, 1, &text, &length, &status);
    CheckCl(status, "clCreateProgramWithSource", Where());
    status = clBuildProgram(program, 1, &device, options.c_str(), nullptr, nullptr);
    if (status != CL_SUCCESS) {
      std::string log;
      size_t size = 0;
      if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) == CL_SUCCESS && size) {
        log.resize(size);
        clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
        while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) log.pop_back();
      }
      clReleaseProgram(program);
      NABLA_THROW(kExternal, "building an OpenCL program", Where(), " failed: ", StatusName(status), " (", status,
                  "); build options '", options, "'; build log:\n", log.empty() ? "(empty)" : log);
    }
    programs.emplace(std::move(key), program);
    return program;
  }

  cl_kernel Kernel(cl_program program, const std::string& name) {
    auto key = std::make_pair(program, name);
    auto it = kernels.find(key);
    if (it != kernels.end()) return it->second;
    cl_int status = CL_SUCCESS;
    cl_kernel kernel = clCreateKernel(program, name.c_str(), &status);
    CheckCl(status, "clCreateKernel", StrCat(" for kernel '", name, "'", Where()));
    kernels.emplace(key, kernel);
    return kernel;
  }
};

ClDevice::ClDevice(const DeviceInfo& info) : impl_(std::make_unique<Impl>()) {
  impl_->info = info;
  std::vector<DeviceIds> ids = AllDeviceIds();
  NABLA_ENFORCE(info.index >= 0 && static_cast<size_t>(info.index) < ids.size(), kNotFound,
                "no OpenCL device opencl:", info.index, " (", ids.size(), " found)");
  impl_->platform = ids[info.index].platform;
  impl_->device = ids[info.index].device;
  cl_int status = CL_SUCCESS;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(impl_->platform), 0};
  impl_->context = clCreateContext(props, 1, &impl_->device, nullptr, nullptr, &status);
  CheckCl(status, "clCreateContext", impl_->Where());
  impl_->queue = clCreateCommandQueue(impl_->context, impl_->device, 0, &status);
  if (status != CL_SUCCESS) clReleaseContext(impl_->context);
  CheckCl(status, "clCreateCommandQueue", impl_->Where());
  impl_->local = std::min(kDefaultLocal, std::max<size_t>(1, info.max_work_group_size));
}

ClDevice::~ClDevice() {
  if (!impl_->queue) return;
  clFinish(impl_->queue);
  impl_->DrainPool();
  for (auto& [key, kernel] : impl_->kernels) clReleaseKernel(kernel);
  for (auto& [key, program] : impl_->programs) clReleaseProgram(program);
  clReleaseCommandQueue(impl_->queue);
  clReleaseContext(impl_->context);
}

int ClDevice::Id() const { return impl_->info.index; }
std::string ClDevice::Name() const { return StrCat("opencl:", impl_->info.index, " (", impl_->info.name, ")"); }
const DeviceInfo& ClDevice::Info() const { return impl_->info; }

void* ClDevice::Allocate(size_t bytes) {
  const size_t size = SizeClass(bytes);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->pool.find(size);
  if (it != impl_->pool.end()) {
    cl_mem mem = it->second;
    impl_->pool.erase(it);
    impl_->pooled_bytes -= size;
    impl_->live_bytes += size;
    impl_->live[mem] = size;
    return mem;
  }
  const DeviceInfo& info = impl_->info;
  auto out_of_memory = [&](const std::string& why) {
    return StrCat("out of device memory", impl_->Where(), ": cannot allocate ", bytes, " bytes (", MiB(bytes), "); ",
                  why, "; in use: ", MiB(impl_->live_bytes), " of ", MiB(info.global_mem_bytes),
                  ". Use smaller batches or --device cpu");
  };
  NABLA_ENFORCE(size <= info.max_alloc_bytes, kExternal,
                out_of_memory(StrCat("expected at most ", MiB(info.max_alloc_bytes), " per buffer (",
                                     "CL_DEVICE_MAX_MEM_ALLOC_SIZE)")));
  // Drivers that overcommit fail late, inside a kernel; keep within what the
  // device reports so the failure is this one.
  if (impl_->live_bytes + impl_->pooled_bytes + size > info.global_mem_bytes) impl_->DrainPool();
  NABLA_ENFORCE(impl_->live_bytes + size <= info.global_mem_bytes, kExternal,
                out_of_memory("the device's global memory is full"));
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(impl_->context, CL_MEM_READ_WRITE, size, nullptr, &status);
  if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES || status == CL_OUT_OF_HOST_MEMORY) {
    impl_->DrainPool();
    mem = clCreateBuffer(impl_->context, CL_MEM_READ_WRITE, size, nullptr, &status);
  }
  if (status != CL_SUCCESS) NABLA_THROW(kExternal, out_of_memory(StrCat("clCreateBuffer: ", StatusName(status))));
  impl_->live_bytes += size;
  impl_->live[mem] = size;
  return mem;
}

void ClDevice::Free(void* ptr, size_t bytes) {
  if (!ptr) return;
  const size_t size = SizeClass(bytes);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // Commands already enqueued on the in-order queue still run before any
  // later user of this buffer, so it can be handed out again at once.
  impl_->pool.emplace(size, static_cast<cl_mem>(ptr));
  impl_->live.erase(ptr);
  impl_->live_bytes -= size;
  impl_->pooled_bytes += size;
}

size_t ClDevice::LiveBytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->live_bytes;
}

size_t ClDevice::PooledBytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->pooled_bytes;
}

size_t ClDevice::BufferBytes(const void* buffer) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->live.find(buffer);
  return it == impl_->live.end() ? 0 : it->second;
}

void ClDevice::ReleasePool() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->DrainPool();
}

void ClDevice::CopyFromHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CheckCl(clEnqueueWriteBuffer(impl_->queue, AsMem(dst), CL_TRUE, 0, bytes, src, 0, nullptr, nullptr),
          "clEnqueueWriteBuffer", StrCat(" (", bytes, " bytes)", impl_->Where()));
}

void ClDevice::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CheckCl(clEnqueueReadBuffer(impl_->queue, AsMem(src), CL_TRUE, 0, bytes, dst, 0, nullptr, nullptr),
          "clEnqueueReadBuffer", StrCat(" (", bytes, " bytes)", impl_->Where()));
}

void ClDevice::CopyOnDevice(void* dst, const void* src, size_t bytes) { CopyRegion(dst, 0, src, 0, bytes); }

void ClDevice::CopyRegion(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) {
  if (bytes == 0 || (dst == src && dst_offset == src_offset)) return;
  CheckCl(clEnqueueCopyBuffer(impl_->queue, AsMem(src), AsMem(dst), src_offset, dst_offset, bytes, 0, nullptr, nullptr),
          "clEnqueueCopyBuffer", StrCat(" (", bytes, " bytes)", impl_->Where()));
}

void ClDevice::Fill(void* dst, size_t offset, size_t bytes, const void* pattern, size_t pattern_bytes) {
  if (bytes == 0) return;
  CheckCl(clEnqueueFillBuffer(impl_->queue, AsMem(dst), pattern, pattern_bytes, offset, bytes, 0, nullptr, nullptr),
          "clEnqueueFillBuffer", StrCat(" (", bytes, " bytes)", impl_->Where()));
}

void ClDevice::Synchronize() { CheckCl(clFinish(impl_->queue), "clFinish", impl_->Where()); }

bool ClDevice::IsProgramCached(const std::string& source, const std::string& options) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->programs.count(options + '\n' + source) > 0;
}

void ClDevice::Launch(const std::string& source, const std::string& options, const std::string& kernel_name,
                      const std::vector<KernelArg>& args, size_t global, size_t local) {
  if (global == 0) return;
  if (local == 0) local = impl_->local;
  const size_t rounded = (global + local - 1) / local * local;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  cl_kernel kernel = impl_->Kernel(impl_->Program(source, options), kernel_name);
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    cl_int status = a.GetKind() == KernelArg::Kind::kLocal ? clSetKernelArg(kernel, i, a.Size(), nullptr)
                                                           : clSetKernelArg(kernel, i, a.Size(), a.Data());
    CheckCl(status, "clSetKernelArg", StrCat(" (kernel '", kernel_name, "', argument ", i, ")", impl_->Where()));
  }
  CheckCl(clEnqueueNDRangeKernel(impl_->queue, kernel, 1, nullptr, &rounded, &local, 0, nullptr, nullptr),
          "clEnqueueNDRangeKernel", StrCat(" (kernel '", kernel_name, "', ", global, " work items)", impl_->Where()));
}

namespace {

template <typename T>
void ClBlastGemm(ClDevice& dev, ClDevice::Impl& impl, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 T alpha, const void* a, int64_t a_offset, int64_t lda, const void* b, int64_t b_offset, int64_t ldb,
                 T beta, void* c, int64_t c_offset, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // CLBlast rejects k == 0; the product is beta * C. Grad kernels zero-fill
    // (beta 0) or accumulate (beta 1, batched matmul_grad over an empty
    // batch: C stays as it is); no caller scales.
    if (beta == T(1)) return;
    NABLA_ENFORCE(beta == T(0), kUnimplemented, "OpenCL GEMM with k == 0 and beta ", beta, " (only 0 and 1)");
    const T zero = T(0);
    for (int64_t i = 0; i < m; ++i) dev.Fill(c, (c_offset + i * ldc) * sizeof(T), n * sizeof(T), &zero, sizeof zero);
    return;
  }
  std::lock_guard<std::mutex> lock(impl.mutex);
  clblast::StatusCode status =
      clblast::Gemm<T>(clblast::Layout::kRowMajor, trans_a ? clblast::Transpose::kYes : clblast::Transpose::kNo,
                       trans_b ? clblast::Transpose::kYes : clblast::Transpose::kNo, m, n, k, alpha, AsMem(a), a_offset,
                       lda, AsMem(b), b_offset, ldb, beta, AsMem(c), c_offset, ldc, &impl.queue, nullptr);
  if (status != clblast::StatusCode::kSuccess) {
    NABLA_THROW(kExternal, "CLBlast Gemm<", sizeof(T) == 4 ? "float" : "double", "> ", m, "x", n, "x", k,
                trans_a ? " (A^T)" : "", trans_b ? " (B^T)" : "", impl.Where(),
                " failed: ", ClBlastStatusName(static_cast<int>(status)), " (", static_cast<int>(status), ")");
  }
}

}  // namespace

void ClDevice::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                    int64_t a_offset, int64_t lda, const void* b, int64_t b_offset, int64_t ldb, float beta, void* c,
                    int64_t c_offset, int64_t ldc) {
  ClBlastGemm<float>(*this, *impl_, trans_a, trans_b, m, n, k, alpha, a, a_offset, lda, b, b_offset, ldb, beta, c,
                     c_offset, ldc);
}

void ClDevice::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                    int64_t a_offset, int64_t lda, const void* b, int64_t b_offset, int64_t ldb, double beta, void* c,
                    int64_t c_offset, int64_t ldc) {
  NABLA_ENFORCE(impl_->info.fp64, kUnimplemented, "float64 GEMM", impl_->Where(),
                ": the device has no cl_khr_fp64; use float32 or --device cpu");
  ClBlastGemm<double>(*this, *impl_, trans_a, trans_b, m, n, k, alpha, a, a_offset, lda, b, b_offset, ldb, beta, c,
                      c_offset, ldc);
}

}  // namespace nabla::opencl
