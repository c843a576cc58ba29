#pragma once
// gelu's erf form x Phi(x) and its derivative Phi(x) + x phi(x), in scalar
// arithmetic: the float64 kernels of gelu and of the fused bias + gelu
// (fused_elemwise_activation) share them, so the two agree bit for bit.
// float32 has the vector code of nabla/cpu/cpu.h (cpu::Gelu, cpu::GeluGrad).
#include <cmath>

// Not needed here, but under the C ABI (nabla/sdk/shim) it is the SDK, which
// must come first so that nabla::opkit is the SDK's op kit namespace.
#include "nabla/types.h"

namespace nabla::opkit {

template <typename T>
T GeluErf(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
}

template <typename T>
T GeluErfGrad(T x) {
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
  return cdf + x * T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
}

}  // namespace nabla::opkit
