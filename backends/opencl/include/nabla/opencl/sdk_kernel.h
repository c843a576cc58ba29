#pragma once
// OpenCL kernels for C++ plugins on nabla's C ABI (the header-only SDK,
// nabla/plugin.h from an install), over the OpenCL device plugin's C table
// (nabla/opencl/opencl_c.h): a smaller API than nabla/opencl/kernel.h's
// (which also builds on the C ABI, through nabla/opencl/sdk_device.h), with
// tensors as kernel arguments. The plugin links neither nabla nor OpenCL; its
// OpenCL C is embedded by nabla_add_opencl_kernels() (nabla_opencl.cmake):
// `swish.cl` becomes the header `swish_cl.h` declaring
// `const std::string& nabla::cl_source::swish()`, with the prelude (T, the
// fp64 pragma, GID) in front. The program is compiled once per process,
// device and element type T (-DT=float, or -DT=double -DNABLA_FP64).
//
//   template <typename T>
//   struct SwishCl {
//     void operator()(const nabla::ExecutionContext& ctx) const {
//       const nabla::Tensor& x = ctx.Input("X");
//       nabla::Tensor* out = ctx.Output("Out");
//       out->Allocate(ctx.GetDevice(), nabla::DTypeOf<T>::value, x.GetShape());
//       nabla::opencl::Run<T>(ctx, nabla::cl_source::swish(), "swish",
//                             {nabla::opencl::Arg(x), nabla::opencl::Arg(*out), nabla::opencl::Arg(x.Numel())},
//                             x.Numel());
//     }
//   };
//   NABLA_REGISTER_OPS(swish_opencl) { nabla::opencl::RegisterOpenClKernels<SwishCl>(registrar, "swish", __FILE__,
//   __LINE__); }
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "nabla/opencl/opencl_c.h"
#include "nabla/plugin.h"

namespace nabla::opencl {

// One kernel argument: a tensor (its device buffer; an input still on the
// host is uploaded for the launch), a scalar of the kernel's C type (int,
// long, float, double: pass int32_t, int64_t, float, double), raw bytes for
// a vector type (long8: Raw), or a __local array (Local).
class Arg {
 public:
  Arg(const Tensor& t) {
    a_.kind = NABLA_OPENCL_ARG_TENSOR;
    a_.tensor = t.Handle();
  }
  Arg(int32_t v) { Set(&v, sizeof v); }
  Arg(int64_t v) { Set(&v, sizeof v); }
  Arg(float v) { Set(&v, sizeof v); }
  Arg(double v) { Set(&v, sizeof v); }
  static Arg Raw(const void* data, size_t bytes) {
    Arg a;
    a.Set(data, bytes);
    return a;
  }
  static Arg Local(size_t bytes) {
    Arg a;
    a.a_.kind = NABLA_OPENCL_ARG_LOCAL;
    a.a_.size = static_cast<uint32_t>(bytes);
    return a;
  }
  // The C argument; points into this object.
  nabla_opencl_arg C() const {
    nabla_opencl_arg c = a_;
    if (c.kind == NABLA_OPENCL_ARG_VALUE) c.value = bytes_;
    return c;
  }

 private:
  Arg() = default;
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

// The OpenCL device plugin's table (throws when it is not loaded).
inline const nabla_opencl_api& ClApi() {
  const nabla_opencl_api* table = nabla_opencl_get_api(&Api());
  if (!table) sdk_detail::ThrowApiError();
  return *table;
}

// Build options for element type T. Float64 needs cl_khr_fp64; a device
// without it says so instead of failing to compile.
template <typename T>
std::string BuildOptions(Device& device) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "OpenCL kernels are float32 or float64");
  if constexpr (std::is_same_v<T, double>) {
    const int32_t fp64 = ClApi().device_fp64(&Api(), device.Handle());
    if (fp64 < 0) sdk_detail::ThrowApiError();
    NABLA_ENFORCE(fp64 == 1, kUnimplemented,
                  "this OpenCL device has no double precision (cl_khr_fp64): run float64 programs with --device cpu");
    return "-DT=double -DNABLA_FP64";
  } else {
    return "-DT=float";
  }
}

// Launches `kernel` of `source` for element type T on the kernel's device
// over `global` items (nothing when global <= 0, so empty tensors need no
// special case).
template <typename T>
void Run(const ExecutionContext& ctx, const std::string& source, const char* kernel, const std::vector<Arg>& args,
         int64_t global, size_t local = 0) {
  if (global <= 0) return;
  Device& device = ctx.GetDevice();
  const std::string options = BuildOptions<T>(device);
  std::vector<nabla_opencl_arg> c;
  c.reserve(args.size());
  for (const Arg& a : args) c.push_back(a.C());
  sdk_detail::Check(ClApi().launch(&Api(), device.Handle(), source.data(), source.size(), options.c_str(), kernel,
                                   c.data(), c.size(), static_cast<size_t>(global), local));
}

// Registers Kernel<float> and Kernel<double>, each built from `args`, as op
// `type`'s OpenCL kernels (the op must be this plugin's).
template <template <typename> class Kernel, typename... Args>
void RegisterOpenClKernels(Registrar& registrar, const std::string& type, const char* file, int line,
                           const Args&... args) {
  registrar.Kernel(type, DeviceType::kOpenCL, DType::kFloat32, Kernel<float>{args...}, file, line);
  registrar.Kernel(type, DeviceType::kOpenCL, DType::kFloat64, Kernel<double>{args...}, file, line);
}

}  // namespace nabla::opencl
