#pragma once
// The activations that the fused bias-add ops (fc, fused_elemwise_activation)
// apply, by name, and their scalar formulas. The formulas are relu_op.cc's,
// tanh_op.cc's (float64), sigmoid_op.cc's (opkit::Sigmoid) and gelu_op.cc's
// (float64: opkit::GeluErf), written once here so that a fused program
// computes the unfused one's bits by construction.
#include <cmath>
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
      return x > T(0) ? x : T(0);
    case BiasAct::kTanh:
      return std::tanh(x);
    case BiasAct::kSigmoid:
      return Sigmoid(x);
    case BiasAct::kGelu:
      return GeluErf(x);
  }
  return x;
}

}  // namespace nabla::math_ops
