#pragma once
// Private helpers of the opencl_ops plugin: device access, input staging,
// launching the plugin's kernels (kernels.cl) and registering kernels only
// for ops that exist.
#include <deque>
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opencl/opencl.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::opencl_ops {

using opencl::KernelArg;
using opencl::OpenClDevice;

// The OpenCL C of kernels.cl (generated into kernels_cl.cc by CMake).
const std::string& KernelSource();

inline OpenClDevice& Dev(const ExecutionContext& ctx) {
  auto* dev = dynamic_cast<OpenClDevice*>(&ctx.GetDevice());
  NABLA_ENFORCE(dev != nullptr, kPreconditionNotMet, "op '", ctx.Op().Type(),
                "': an OpenCL kernel ran on device ", ctx.GetDevice().Name(), ", which is not an OpenCL device");
  return *dev;
}

template <typename T>
const char* TypeName();
template <>
inline const char* TypeName<float>() {
  return "float";
}
template <>
inline const char* TypeName<double>() {
  return "double";
}

// Build options of the plugin's program for element type T.
template <typename T>
std::string Options(OpenClDevice& dev) {
  if constexpr (std::is_same_v<T, double>) {
    NABLA_ENFORCE(dev.Info().fp64, kUnimplemented, dev.Name(),
                  " has no double precision (cl_khr_fp64): run float64 programs with --device cpu");
    return "-DT=double -DNABLA_FP64";
  } else {
    return "-DT=float";
  }
}

// Launches kernel `name` of kernels.cl for element type T.
template <typename T>
void Run(OpenClDevice& dev, const char* name, const std::vector<KernelArg>& args, int64_t global, size_t local = 0) {
  if (global <= 0) return;
  dev.Launch(KernelSource(), Options<T>(dev), name, args, static_cast<size_t>(global), local);
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
  // the other float type (optimizers accept float32 learning rates for
  // float64 parameters) through the host.
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

// Allocates `out` on the kernel's device with `shape` and T's dtype.
template <typename T>
void* Out(const ExecutionContext& ctx, Tensor* out, Shape shape) {
  return out->Allocate(ctx.GetDevice(), DTypeOf<T>::value, std::move(shape));
}

template <typename T>
void Zero(OpenClDevice& dev, void* buf, int64_t n) {
  const T zero = T(0);
  dev.Fill(buf, 0, static_cast<size_t>(n) * sizeof(T), &zero, sizeof zero);
}

// This plugin declares no op: it adds OpenCL kernels to ops of plugins that
// load before it (math_ops, nn_ops; the standard plugins load in name
// order). An op that is not registered gets no kernel instead of failing the
// whole plugin, so a build without nn_ops still has its math kernels.
inline bool OpExists(const std::string& type) { return CurrentRegistry()->Find(type) != nullptr; }

// Registers fn<float> and fn<double> for `type` on kOpenCL when the op exists.
template <template <typename> class Kernel>
void RegisterFloatKernels(Registrar& registrar, const std::string& type, const char* file, int line) {
  if (!OpExists(type)) return;
  registrar.Kernel(type, DeviceType::kOpenCL, DType::kFloat32, Kernel<float>{}, file, line);
  registrar.Kernel(type, DeviceType::kOpenCL, DType::kFloat64, Kernel<double>{}, file, line);
}

// Paddle's axis view of a tensor around one dim: [outer, dim, inner].
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
};

inline int NormalizeAxis(int axis, size_t rank, const std::string& where) {
  const int r = static_cast<int>(rank);
  NABLA_ENFORCE(axis >= -r && axis < r, kOutOfRange, where, ": attribute axis must be in [", -r, ", ", r,
                ") for an input of rank ", r, ", but received ", axis);
  return axis < 0 ? axis + r : axis;
}

inline AxisView ViewAround(const Shape& shape, int axis) {
  AxisView v;
  for (int i = 0; i < axis; ++i) v.outer *= shape[i];
  v.dim = shape[axis];
  for (size_t i = axis + 1; i < shape.size(); ++i) v.inner *= shape[i];
  return v;
}

// Eight int64 values for a long8 kernel argument.
inline KernelArg Long8(const std::vector<int64_t>& values) {
  int64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < values.size() && i < 8; ++i) v[i] = values[i];
  return KernelArg::Raw(v, sizeof v);
}

}  // namespace nabla::opencl_ops
