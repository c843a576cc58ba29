#pragma once
// Helpers for writing an op's OpenCL kernels beside the op, in the plugin
// that defines it (plugins/<plugin>/<family>_opencl.cc + <family>.cl), so
// that an op and all its kernels are one unit. Built for the C ABI
// (-DNABLA_PLUGIN_C_ABI, nabla_add_plugin(... ABI C)), the same names come
// from nabla/opencl/sdk_device.h over the OpenCL device plugin's C table, so
// such a file builds unchanged either way; nabla/opencl/sdk_kernel.h is the
// C ABI's own smaller API (tensors as arguments).
// Everything here is inline or virtual: the plugin links nothing of the
// OpenCL backend, which the core loads only when a device asks for it. The
// plugin's CMakeLists embeds its .cl files with nabla_add_opencl_kernels()
// (cmake/nabla_opencl.cmake): `<family>.cl` becomes the generated
// header `<family>_cl.h` declaring
// `const std::string& nabla::cl_source::<family>()`.
//
// The OpenCL C is compiled once per process, device and element type T
// (-DT=float, or -DT=double -DNABLA_FP64); backends/opencl/cl/prelude.cl,
// put in front of every .cl, enables cl_khr_fp64 and defines GID. Global
// sizes are rounded up to whole work groups, so every kernel guards its index
// against the element count.
//
//   template <typename T>
//   struct ScaleKernel {
//     void operator()(const ExecutionContext& ctx) const {
//       OpenClDevice& dev = DeviceOf(ctx);
//       Staging s(dev);
//       const Tensor& x = ctx.Input("X");
//       KernelArg in = s.Arg(x);
//       void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
//       Run<T>(dev, cl_source::scale(), "scale", {in, KernelArg::Buffer(out), KernelArg(x.Numel())}, x.Numel());
//     }
//   };
//   NABLA_REGISTER_OPS(scale_opencl) { RegisterOpenClKernels<ScaleKernel>(registrar, "scale", __FILE__, __LINE__); }
#ifdef NABLA_PLUGIN_C_ABI
#include "nabla/opencl/sdk_device.h"
#else
#include <cstdint>
#include <deque>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opencl/opencl.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::opencl {

// The OpenCL device a kernel runs on; a kernel registered for kOpenCL that
// somehow runs elsewhere is a one-line error rather than a bad cast. By
// type, not dynamic_cast: the plugin and the backend each have their own
// copy of OpenClDevice's type info (nabla/opencl/opencl.h).
inline OpenClDevice& DeviceOf(const ExecutionContext& ctx) {
  Device& dev = ctx.GetDevice();
  NABLA_ENFORCE(dev.Type() == DeviceType::kOpenCL, kPreconditionNotMet, "op '", ctx.Op().Type(),
                "': an OpenCL kernel ran on device ", dev.Name(), ", which is not an OpenCL device");
  return static_cast<OpenClDevice&>(dev);
}

// Build options for element type T. Float64 needs cl_khr_fp64; a device
// without it says so instead of failing to compile.
template <typename T>
std::string BuildOptions(OpenClDevice& dev) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "OpenCL kernels are float32 or float64");
  if constexpr (std::is_same_v<T, double>) {
    NABLA_ENFORCE(dev.Info().fp64, kUnimplemented, dev.Name(),
                  " has no double precision (cl_khr_fp64): run float64 programs with --device cpu");
    return "-DT=double -DNABLA_FP64";
  } else {
    return "-DT=float";
  }
}

// Launches `kernel` of `source` for element type T over `global` items
// (nothing when global <= 0, so empty tensors need no special case).
template <typename T>
void Run(OpenClDevice& dev, const std::string& source, const char* kernel, const std::vector<KernelArg>& args,
         int64_t global, size_t local = 0) {
  if (global <= 0) return;
  dev.Launch(source, BuildOptions<T>(dev), kernel, args, static_cast<size_t>(global), local);
}

// Device buffers for a kernel's inputs: a tensor on this device is used in
// place; one elsewhere (a feed read on the host, a CPU-fallback result) is
// uploaded into a temporary that lives as long as this object. Commands on
// the in-order queue run before any later reuse of a freed buffer, so the
// temporaries may go as soon as the kernel is enqueued.
class Staging {
 public:
  explicit Staging(OpenClDevice& dev) : dev_(dev) {}
  const void* In(const Tensor& t) {
    if (t.GetDevice() == &dev_) return t.RawData();
    temps_.emplace_back();
    temps_.back().CopyFrom(t, dev_);
    return temps_.back().RawData();
  }
  KernelArg Arg(const Tensor& t) { return KernelArg::Buffer(In(t)); }
  // A one-element tensor as a T buffer on the device, converting a scalar of
  // the other float type through the host (optimizers accept float32
  // learning rates for float64 parameters).
  template <typename T>
  KernelArg Scalar(const Tensor& t, const std::string& op, const std::string& slot) {
    NABLA_ENFORCE(t.Numel() == 1, kInvalidArgument, "op '", op, "': input ", slot,
                  " must hold exactly one element, but received shape ", ShapeToString(t.GetShape()));
    if (t.GetDType() == DTypeOf<T>::value) return Arg(t);
    NABLA_ENFORCE(IsFloating(t.GetDType()), kInvalidArgument, "op '", op, "': input ", slot,
                  " must be float32 or float64, but received ", DTypeName(t.GetDType()));
    Tensor host;
    host.CopyFrom(t, HostDevice());
    T value = t.GetDType() == DType::kFloat64 ? static_cast<T>(host.Data<double>()[0])
                                              : static_cast<T>(host.Data<float>()[0]);
    temps_.emplace_back();
    void* buf = temps_.back().Allocate(dev_, DTypeOf<T>::value, {1});
    dev_.CopyFromHost(buf, &value, sizeof value);
    return KernelArg::Buffer(buf);
  }

 private:
  OpenClDevice& dev_;
  std::deque<Tensor> temps_;
};

// Allocates `out` on the kernel's device with `shape` and T's dtype; returns
// its buffer for KernelArg::Buffer or OpenClDevice::Gemm.
template <typename T>
void* AllocateOutput(const ExecutionContext& ctx, Tensor* out, Shape shape) {
  return out->Allocate(ctx.GetDevice(), DTypeOf<T>::value, std::move(shape));
}

// A device temporary the kernel owns, freed when the object goes (the
// in-order queue runs every command that uses it first). Declared empty and
// given its size by Allocate, so a kernel can make one on one branch only:
//   Scratch<T> tmp(dev);
//   void* buf = need ? tmp.Allocate(n) : out;
// The C ABI's (nabla/opencl/sdk_device.h) is the same class over the OpenCL
// device plugin's C table.
template <typename T>
class Scratch {
 public:
  explicit Scratch(OpenClDevice& dev) : dev_(dev) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // n (>= 0) elements of T, replacing any earlier ones; the buffer for
  // KernelArg::Buffer or OpenClDevice::Gemm.
  void* Allocate(int64_t n) { return t_.Allocate(dev_, DTypeOf<T>::value, {n}); }

 private:
  OpenClDevice& dev_;
  Tensor t_;
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

// Registers Kernel<float> and Kernel<double>, each built from `args`, as
// op `type`'s kOpenCL kernels. The op must be defined by the same plugin:
// the registry rejects a kernel for an op registered elsewhere. Kernel must
// be a class template (an alias template of a shared base made two files'
// kernels one symbol once), and its name unique among the plugin's OpenCL
// kernels even inside an anonymous namespace: this function's instances for
// two files' `MeanKernel`s mangle alike and only one of them survived the
// plugin's (link-time optimised) link, so reduce_mean ran mean's kernel.
template <template <typename> class Kernel, typename... Args>
void RegisterOpenClKernels(Registrar& registrar, const std::string& type, const char* file, int line,
                           const Args&... args) {
  registrar.Kernel(type, DeviceType::kOpenCL, DType::kFloat32, Kernel<float>{args...}, file, line);
  registrar.Kernel(type, DeviceType::kOpenCL, DType::kFloat64, Kernel<double>{args...}, file, line);
}

}  // namespace nabla::opencl

#endif  // NABLA_PLUGIN_C_ABI
