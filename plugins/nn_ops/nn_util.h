#pragma once
// What the nn_ops op files share beyond the op kit (nabla/opkit): the kit
// itself, pulled into this plugin's namespace, and cross-entropy's clipped
// log. Private to this plugin. Only what the C ABI SDK provides too, so op
// files that include nothing more (the activations) build over either ABI;
// helpers that need nabla's C++ core are in nn_core_util.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/opkit.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::nn {

using namespace nabla::opkit;  // NOLINT: every op file here builds on the kit

// cross_entropy's clipped log, which softmax_with_cross_entropy with
// use_softmax = false shares: log(max(x, 1e-20)), so a zero probability
// gives a large finite loss, and its exact derivative (0 where x <= 1e-20),
// where Paddle's -1 / x would be infinite.
constexpr double kMinProb = 1e-20;

template <typename T>
T ClippedLog(T x) {
  return std::log(std::max(x, static_cast<T>(kMinProb)));
}

// d(-log(max(x, eps)))/dx.
template <typename T>
T ClippedLogGrad(T x) {
  return x > static_cast<T>(kMinProb) ? T(-1) / x : T(0);
}

// softmax_with_cross_entropy's Loss: Logits' shape with 1 on the class
// axis, or a hard Label's own shape when it has Logits' rank less one (class
// axis last; what cross_entropy takes, so fusing softmax + cross_entropy
// keeps Y's shape).
inline Shape SoftmaxCrossEntropyLossShape(const Shape& logits, const Shape& label, int axis) {
  if (label.size() + 1 == logits.size() && axis == static_cast<int>(logits.size()) - 1) return label;
  Shape loss = logits;
  loss[axis] = 1;
  return loss;
}

}  // namespace nabla::nn
