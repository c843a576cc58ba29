#pragma once
// The activations that the fused bias-add ops (fc, fused_elemwise_activation)
// apply, by name, and their scalar formulas. The formulas are relu_op.cc's,
// tanh_op.cc's (float64), sigmoid_op.cc's (opkit::Sigmoid) and gelu_op.cc's
// (float64: opkit::GeluErf), written once here so that a fused program
// computes the unfused one's bits by construction.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "math_util.h"
#include "nabla/opkit/gelu.h"

namespace nabla::math_ops {

enum class BiasAct { kIdentity, kRelu, kTanh, kSigmoid, kGelu };

// "" is kIdentity; false for a name that is none of these. Each op then
// refuses what it does not compute (fc: gelu; the fused op: none).
inline bool ParseBiasAct(const std::string& name, BiasAct* act) {
  if (name.empty()) {
    *act = BiasAct::kIdentity;
  } else if (name == "relu") {
    *act = BiasAct::kRelu;
  } else if (name == "tanh") {
    *act = BiasAct::kTanh;
  } else if (name == "sigmoid") {
    *act = BiasAct::kSigmoid;
  } else if (name == "gelu") {
    *act = BiasAct::kGelu;
  } else {
    return false;
  }
  return true;
}

template <typename T>
T ApplyBiasAct(BiasAct act, T x) {
  switch (act) {
    case BiasAct::kIdentity:
      return x;
    case BiasAct::kRelu:
      return x < T(0) ? T(0) : x;  // NaN stays NaN, as relu_op keeps it
    case BiasAct::kTanh:
      return std::tanh(x);
    case BiasAct::kSigmoid:
      return Sigmoid(x);
    case BiasAct::kGelu:
      return GeluErf(x);
  }
  return x;
}

// dOut * act'(x) from act's output `out` (identity: dOut; gelu, whose
// derivative needs the sum and not Out, is each kernel's own business).
template <typename T>
T BiasActGrad(BiasAct act, T out, T dout) {
  switch (act) {
    case BiasAct::kRelu:
      return out > T(0) ? dout : T(0);
    case BiasAct::kTanh:
      return dout * (T(1) - out * out);
    case BiasAct::kSigmoid:
      return dout * out * (T(1) - out);
    case BiasAct::kGelu:
    case BiasAct::kIdentity:
      break;
  }
  return dout;
}

// Rows of `inner` elements in a block of about 4096 (16 KiB of float32, in
// L1 while the sum and the activation or its gradient pass over it).
inline int64_t RowsPerBlock(int64_t inner) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)); }

}  // namespace nabla::math_ops
