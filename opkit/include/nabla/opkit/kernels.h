#pragma once
// Registering CPU kernels over lists of dtypes, output allocation, and the
// parallel elementwise loop: what nearly every kernel file needs.
// Header-only, for plugins on the C ABI too (nabla/sdk/opkit.h).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "nabla/cpu/cpu.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/vectorized.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::opkit {

// Registers Kernel<T>{} as the CPU kernel of `type` for every T in Ts.
template <template <typename> class Kernel, typename... Ts>
void RegisterCpuKernels(Registrar& registrar, const std::string& type, const char* file, int line) {
  (registrar.Kernel(type, DeviceType::kCPU, DTypeOf<Ts>::value, Kernel<Ts>{}, file, line), ...);
}

// Registers one CPU kernel per floating dtype (ops that compute in the dtype
// of their float inputs).
inline void RegisterFloatKernels(Registrar& registrar, const std::string& type, KernelFn f32, KernelFn f64,
                                 const char* file, int line) {
  registrar.Kernel(type, DeviceType::kCPU, DType::kFloat32, std::move(f32), file, line);
  registrar.Kernel(type, DeviceType::kCPU, DType::kFloat64, std::move(f64), file, line);
}

// Every dtype, and every dtype but bool: for kernels that move tensors
// without looking at their elements (copies, views, control flow).
inline constexpr std::initializer_list<DType> kAllDTypes = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                                            DType::kInt64, DType::kBool};
inline constexpr std::initializer_list<DType> kNumericDTypes = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                                                DType::kInt64};

// Registers the one dtype-agnostic `fn` as the CPU kernel of `type` for each
// of `dtypes`.
inline void RegisterKernelForDTypes(Registrar& registrar, const std::string& type, std::initializer_list<DType> dtypes,
                                    const KernelFn& fn, const char* file, int line) {
  for (DType t : dtypes) registrar.Kernel(type, DeviceType::kCPU, t, fn, file, line);
}

template <typename T>
struct TypeTag {
  using type = T;
};
// Calls f(TypeTag<T>{}) for every T in Ts (for kernels built from lambdas).
template <typename... Ts, typename F>
void ForEachType(F&& f) {
  (f(TypeTag<Ts>{}), ...);
}

// Allocates `out` with the shape runtime shape inference gave it.
template <typename T>
T* AllocOutput(const ExecutionContext& ctx, Tensor* out) {
  return out->Allocate<T>(ctx.GetDevice(), out->GetShape());
}

template <typename T>
T* AllocOutput(const ExecutionContext& ctx, Tensor* out, const Shape& shape) {
  return out->Allocate<T>(ctx.GetDevice(), shape);
}

// f(i) for every i in [0, n), split over the executor's threads when n is
// large (cpu::ParallelFor), at the CPU's vector width (vectorized.h). f(i)
// must write element i only. Each chunk runs a copy of f, a local the
// compiler keeps in registers: a float f captures by value then cannot be
// overwritten by f's own float stores, so the loop vectorizes. A float
// captured by reference could be, and is reloaded each element, which
// keeps the loop scalar (leaky_relu: 6 ns an element); capture by value.
template <typename F>
void ParallelElementwise(int64_t n, F&& f) {
  VectorizedParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
    std::decay_t<F> g = f;
    for (int64_t i = b; i < e; ++i) g(i);
  });
}

}  // namespace nabla::opkit
