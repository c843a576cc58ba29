#pragma once
// nabla/opencl/kernel.h for plugins on the C ABI (-DNABLA_PLUGIN_C_ABI,
// which nabla_add_plugin(... ABI C) sets; kernel.h includes this file then):
// the same names (DeviceOf, OpenClDevice's Gemm / Fill / copies, KernelArg,
// Staging, Run, AllocateOutput, Scratch, Zero, Long8, RegisterOpenClKernels)
// over the OpenCL device plugin's C table (nabla/opencl/opencl_c.h, version 2), so a
// standard plugin's <family>_opencl.cc builds unchanged as a C-ABI binary.
// Buffers are handles (void*) as in kernel.h: a tensor's data on the OpenCL
// device; the table checks every handle and range it is given. Errors throw
// the SDK's Error, which the SDK's kernel trampoline reports.
//
// Scratch, a device temporary the kernel owns, is a buffer of the table's
// buffer_allocate here (the SDK's Tensor is a handle the core owns).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nabla/opencl/sdk_kernel.h"

namespace nabla::opencl {

namespace sdk_detail_cl {
// The table, checked to be version 2 or later (the functions below).
inline const nabla_opencl_api& ClApi2() {
  const nabla_opencl_api& table = ClApi();
  NABLA_ENFORCE(table.api_version >= 2, kPreconditionNotMet, "the loaded OpenCL device plugin's table is version ",
                table.api_version, "; nabla/opencl/kernel.h over the C ABI needs version 2: use a newer nabla");
  return table;
}
}  // namespace sdk_detail_cl

// One kernel argument, as kernel.h's: a device buffer (Buffer), a scalar
// (int32_t, int64_t, float, double), raw bytes (Raw: long8), or a __local
// array (Local).
class KernelArg {
 public:
  KernelArg(int32_t v) { Set(&v, sizeof v); }
  KernelArg(int64_t v) { Set(&v, sizeof v); }
  KernelArg(float v) { Set(&v, sizeof v); }
  KernelArg(double v) { Set(&v, sizeof v); }
  static KernelArg Raw(const void* data, size_t bytes) {
    KernelArg a;
    a.Set(data, bytes);
    return a;
  }
  static KernelArg Buffer(const void* handle) {
    KernelArg a;
    a.a_.kind = NABLA_OPENCL_ARG_BUFFER;
    a.a_.value = handle;
    return a;
  }
  static KernelArg Local(size_t bytes) {
    KernelArg a;
    a.a_.kind = NABLA_OPENCL_ARG_LOCAL;
    a.a_.size = static_cast<uint32_t>(bytes);
    return a;
  }
  // The C argument; a value points into this object.
  nabla_opencl_arg C() const {
    nabla_opencl_arg c = a_;
    if (c.kind == NABLA_OPENCL_ARG_VALUE) c.value = bytes_;
    return c;
  }

 private:
  KernelArg() = default;
  void Set(const void* data, size_t bytes) {
    NABLA_ENFORCE(bytes <= sizeof bytes_, kInvalidArgument, "an OpenCL kernel argument may be at most ", sizeof bytes_,
                  " bytes, but received ", bytes);
    a_.kind = NABLA_OPENCL_ARG_VALUE;
    a_.size = static_cast<uint32_t>(bytes);
    std::memcpy(bytes_, data, bytes);
  }
  nabla_opencl_arg a_{};
  alignas(16) unsigned char bytes_[64] = {};
};

// The kernel's OpenCL device: the SDK's Device (a handle) with kernel.h's
// OpenClDevice functions. Like every SDK object it is the core's handle seen
// as a class, so it has no data of its own.
class OpenClDevice : public Device {
 public:
  OpenClDevice() = delete;

  // 1 when float64 kernels can run (cl_khr_fp64).
  bool Fp64() {
    const int32_t fp64 = ClApi().device_fp64(&Api(), Handle());
    if (fp64 < 0) sdk_detail::ThrowApiError();
    return fp64 == 1;
  }
  void Launch(const std::string& source, const std::string& options, const std::string& kernel,
              const std::vector<KernelArg>& args, size_t global, size_t local = 0) {
    std::vector<nabla_opencl_arg> c;
    c.reserve(args.size());
    for (const KernelArg& a : args) c.push_back(a.C());
    sdk_detail::Check(ClApi().launch(&Api(), Handle(), source.data(), source.size(), options.c_str(), kernel.c_str(),
                                     c.data(), c.size(), global, local));
  }
  void CopyFromHost(void* dst, const void* src, size_t bytes) {
    sdk_detail::Check(sdk_detail_cl::ClApi2().copy_from_host(&Api(), Handle(), dst, 0, src, bytes));
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) {
    sdk_detail::Check(sdk_detail_cl::ClApi2().copy_to_host(&Api(), Handle(), dst, src, 0, bytes));
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) { CopyRegion(dst, 0, src, 0, bytes); }
  void CopyRegion(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) {
    sdk_detail::Check(sdk_detail_cl::ClApi2().copy_region(&Api(), Handle(), dst, dst_offset, src, src_offset, bytes));
  }
  void Fill(void* dst, size_t offset, size_t bytes, const void* pattern, size_t pattern_bytes) {
    sdk_detail::Check(sdk_detail_cl::ClApi2().fill(&Api(), Handle(), dst, offset, bytes, pattern, pattern_bytes));
  }
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t a_offset,
            int64_t lda, const void* b, int64_t b_offset, int64_t ldb, float beta, void* c, int64_t c_offset,
            int64_t ldc) {
    sdk_detail::Check(sdk_detail_cl::ClApi2().gemm(&Api(), Handle(), NABLA_C_FLOAT32, trans_a, trans_b, m, n, k, alpha,
                                                   a, a_offset, lda, b, b_offset, ldb, beta, c, c_offset, ldc));
  }
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t a_offset,
            int64_t lda, const void* b, int64_t b_offset, int64_t ldb, double beta, void* c, int64_t c_offset,
            int64_t ldc) {
    sdk_detail::Check(sdk_detail_cl::ClApi2().gemm(&Api(), Handle(), NABLA_C_FLOAT64, trans_a, trans_b, m, n, k, alpha,
                                                   a, a_offset, lda, b, b_offset, ldb, beta, c, c_offset, ldc));
  }
};

// The OpenCL device a kernel runs on; elsewhere a one-line error.
inline OpenClDevice& DeviceOf(const ExecutionContext& ctx) {
  Device& dev = ctx.GetDevice();
  NABLA_ENFORCE(dev.Type() == DeviceType::kOpenCL, kPreconditionNotMet, "op '", ctx.Op().Type(),
                "': an OpenCL kernel ran on device type ",
                sdk_detail::Str(Api().device_type_name(static_cast<int32_t>(dev.Type()))),
                ", which is not an OpenCL device");
  // The handle seen as the class with OpenCL's functions, as every SDK
  // object is seen (Device adds no data).
  return static_cast<OpenClDevice&>(dev);
}

template <typename T>
std::string BuildOptions(OpenClDevice& dev) {
  return BuildOptions<T>(static_cast<Device&>(dev));
}

// Launches `kernel` of `source` for element type T over `global` items
// (nothing when global <= 0).
template <typename T>
void Run(OpenClDevice& dev, const std::string& source, const char* kernel, const std::vector<KernelArg>& args,
         int64_t global, size_t local = 0) {
  if (global <= 0) return;
  dev.Launch(source, BuildOptions<T>(dev), kernel, args, static_cast<size_t>(global), local);
}

// Device buffers for a kernel's inputs: a tensor on this device in place,
// one elsewhere uploaded into a temporary held until this object goes (the
// in-order queue runs the kernel before any reuse of the buffer).
class Staging {
 public:
  explicit Staging(OpenClDevice& dev) : dev_(dev) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    for (void* b : temps_) sdk_detail_cl::ClApi2().buffer_free(&Api(), dev_.Handle(), b);
  }
  const void* In(const Tensor& t) {
    void* buffer = nullptr;
    int32_t owned = 0;
    sdk_detail::Check(sdk_detail_cl::ClApi2().stage_tensor(&Api(), dev_.Handle(), t.Handle(), &buffer, &owned));
    if (owned) temps_.push_back(buffer);
    return buffer;
  }
  KernelArg Arg(const Tensor& t) { return KernelArg::Buffer(In(t)); }
  // A one-element tensor as a T buffer on the device, converting a scalar of
  // the other float type through the host.
  template <typename T>
  KernelArg Scalar(const Tensor& t, const std::string& op, const std::string& slot) {
    NABLA_ENFORCE(t.Numel() == 1, kInvalidArgument, "op '", op, "': input ", slot,
                  " must hold exactly one element, but received shape ", ShapeToString(t.GetShape()));
    if (t.GetDType() == DTypeOf<T>::value) return Arg(t);
    NABLA_ENFORCE(IsFloating(t.GetDType()), kInvalidArgument, "op '", op, "': input ", slot,
                  " must be float32 or float64, but received ", DTypeName(t.GetDType()));
    const void* src = In(t);
    T value;
    if (t.GetDType() == DType::kFloat64) {
      double d = 0;
      dev_.CopyToHost(&d, src, sizeof d);
      value = static_cast<T>(d);
    } else {
      float f = 0;
      dev_.CopyToHost(&f, src, sizeof f);
      value = static_cast<T>(f);
    }
    void* buf = Allocate(sizeof value);
    dev_.CopyFromHost(buf, &value, sizeof value);
    return KernelArg::Buffer(buf);
  }

 private:
  void* Allocate(size_t bytes) {
    void* b = sdk_detail_cl::ClApi2().buffer_allocate(&Api(), dev_.Handle(), bytes);
    if (!b) sdk_detail::ThrowApiError();
    temps_.push_back(b);
    return b;
  }
  OpenClDevice& dev_;
  std::vector<void*> temps_;
};

// Allocates `out` on the kernel's device with `shape` and T's dtype; returns
// its buffer for KernelArg::Buffer or OpenClDevice::Gemm.
template <typename T>
void* AllocateOutput(const ExecutionContext& ctx, Tensor* out, Shape shape) {
  return out->Allocate(ctx.GetDevice(), DTypeOf<T>::value, shape);
}

// A device temporary the kernel owns, as kernel.h's: declared empty, sized
// by Allocate, and given back to the device's pool (buffer_free) when the
// object goes; the in-order queue runs every command already enqueued on it
// first. No elements is no buffer (NULL, OpenCL's null buffer), as an empty
// tensor's data is here.
template <typename T>
class Scratch {
 public:
  explicit Scratch(OpenClDevice& dev) : dev_(dev) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // buffer_free fails only for a handle that is not a live buffer of the
  // device, which this one is until here; a destructor cannot throw.
  ~Scratch() { Release(); }

  // n (>= 0) elements of T, replacing any earlier ones; the buffer for
  // KernelArg::Buffer or OpenClDevice::Gemm.
  void* Allocate(int64_t n) {
    NABLA_ENFORCE(n >= 0 && static_cast<uint64_t>(n) <= SIZE_MAX / sizeof(T), kOutOfRange,
                  "an OpenCL scratch buffer of ", n, " elements of ", sizeof(T), " bytes cannot be allocated");
    Release();
    if (n == 0) return nullptr;
    buffer_ = sdk_detail_cl::ClApi2().buffer_allocate(&Api(), dev_.Handle(), static_cast<size_t>(n) * sizeof(T));
    if (!buffer_) sdk_detail::ThrowApiError();
    return buffer_;
  }

 private:
  void Release() {
    if (buffer_) sdk_detail_cl::ClApi2().buffer_free(&Api(), dev_.Handle(), buffer_);
    buffer_ = nullptr;
  }
  OpenClDevice& dev_;
  void* buffer_ = nullptr;
};

template <typename T>
void Zero(OpenClDevice& dev, void* buf, int64_t n) {
  const T zero = T(0);
  dev.Fill(buf, 0, static_cast<size_t>(n) * sizeof(T), &zero, sizeof zero);
}

// Up to eight int64 values as one long8 kernel argument (shapes, strides).
inline KernelArg Long8(const std::vector<int64_t>& values) {
  int64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < values.size() && i < 8; ++i) v[i] = values[i];
  return KernelArg::Raw(v, sizeof v);
}

}  // namespace nabla::opencl
