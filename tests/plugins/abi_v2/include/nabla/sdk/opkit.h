#pragma once
// The op kit's helpers for plugins on the C ABI (nabla/sdk/plugin.h),
// header-only: what nabla/opkit/opkit.h gives under NABLA_PLUGIN_C_ABI.
// The same names and calls as the op kit of nabla's tree for grad makers,
// gradient check cases, kernel registration, parallel loops and the
// overflow-free sigmoid and softplus; the rest of the op kit (broadcasting,
// reductions, views, tensor attributes) needs the C++ core and is not here.
#include <cmath>
#include <exception>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nabla/sdk/plugin.h"

namespace nabla {
inline namespace c_sdk {
namespace opkit {

// ---------------------------------------------------------------- grad makers

inline std::unique_ptr<OpDesc> MakeOp(std::string type, VarNameMap inputs, VarNameMap outputs,
                                      AttributeMap attrs = {}) {
  return std::make_unique<OpDesc>(std::move(type), std::move(inputs), std::move(outputs), std::move(attrs));
}
inline std::vector<std::unique_ptr<OpDesc>> OneOp(std::unique_ptr<OpDesc> op) {
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::move(op));
  return ops;
}
inline std::vector<std::unique_ptr<OpDesc>> OneOp(std::string type, VarNameMap inputs, VarNameMap outputs,
                                                  AttributeMap attrs = {}) {
  return OneOp(MakeOp(std::move(type), std::move(inputs), std::move(outputs), std::move(attrs)));
}
// True when a gradient list names a var someone needs (not @EMPTY@).
inline bool GradWanted(const std::vector<std::string>& grads) { return !grads.empty() && grads[0] != kEmptyVarName; }

// Out takes the shape and dtype of In.
inline void InferSameAs(InferShapeContext& c, const std::string& in, const std::string& out) {
  c.ShareShapeAndDType(in, out);
}

// ---------------------------------------------------------------- gradient check cases

inline GradCheckInput CheckInput(std::string slot, Shape shape, double low = -1.0, double high = 1.0) {
  GradCheckInput in;
  in.slot = std::move(slot);
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}
inline GradCheckInput NoCheck(GradCheckInput in) {
  in.check = false;
  return in;
}
inline GradCheckInput AwayFromKinks(GradCheckInput in, std::vector<double> kinks, double margin) {
  in.kinks = std::move(kinks);
  in.kink_margin = margin;
  return in;
}
inline GradCheckInput IndexIn(std::string slot, Shape shape, int64_t high, std::vector<double> values = {}) {
  GradCheckInput in = NoCheck(CheckInput(std::move(slot), std::move(shape), 0.0, static_cast<double>(high)));
  in.dtype = DType::kInt64;
  in.values = std::move(values);
  return in;
}
inline GradCheckSpec CheckCase(std::string name, std::vector<GradCheckInput> inputs, AttributeMap attrs = {},
                               std::vector<std::pair<std::string, int>> outputs = {}) {
  GradCheckSpec spec;
  spec.name = std::move(name);
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.outputs = std::move(outputs);
  return spec;
}

// ---------------------------------------------------------------- kernels

template <template <typename> class Kernel, typename... Ts>
void RegisterCpuKernels(Registrar& registrar, const std::string& type, const char* file, int line) {
  (registrar.Kernel(type, DeviceType::kCPU, DTypeOf<Ts>::value, Kernel<Ts>{}, file, line), ...);
}
inline void RegisterFloatKernels(Registrar& registrar, const std::string& type, KernelFn f32, KernelFn f64,
                                 const char* file, int line) {
  registrar.Kernel(type, DeviceType::kCPU, DType::kFloat32, std::move(f32), file, line);
  registrar.Kernel(type, DeviceType::kCPU, DType::kFloat64, std::move(f64), file, line);
}

template <typename T>
T* AllocOutput(const ExecutionContext& ctx, Tensor* out, const Shape& shape) {
  return out->Allocate<T>(ctx.GetDevice(), shape);
}

// Elements per chunk of a parallel loop, as the CPU backend's.
inline constexpr int64_t kParallelGrain = 32768;

// f(i) for every i in [0, n), split over the executor's threads when n is
// large. f(i) must write element i only. An exception thrown by f is carried
// over the core's threads and rethrown here.
template <typename F>
void ParallelElementwise(int64_t n, F&& f) {
  struct Job {
    std::remove_reference_t<F>* f;
    std::exception_ptr error;
    bool failed = false;  // read without a lock: a chunk that sees it skips its work
  } job{&f, nullptr, false};
  Api().parallel_for(
      n, kParallelGrain,
      [](void* user, int64_t begin, int64_t end) {
        Job& j = *static_cast<Job*>(user);
        try {
          for (int64_t i = begin; i < end; ++i) (*j.f)(i);
        } catch (...) {
          // Only the first failure is kept; the loop needs no order beyond that.
          if (!__atomic_exchange_n(&j.failed, true, __ATOMIC_ACQ_REL)) j.error = std::current_exception();
        }
      },
      &job);
  if (job.error) std::rethrow_exception(job.error);
}

// ---------------------------------------------------------------- math

// 1 / (1 + e^-x), exponentiating only non-positive numbers.
template <typename T>
T Sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}
// log(1 + e^x) = max(x, 0) + log1p(e^-|x|), without overflow.
template <typename T>
T Softplus(T x) {
  return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::abs(x)));
}

}  // namespace opkit
}  // namespace c_sdk
}  // namespace nabla
