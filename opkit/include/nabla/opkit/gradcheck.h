#pragma once
// Builders of GradCheckSpec cases (`nabla gradcheck`, the op test table):
// inputs drawn from a range, kept off kinks, fixed, unchecked or integer.
// Header-only, for plugins on the C ABI too (nabla/sdk/opkit.h).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/gradcheck.h"
#include "nabla/types.h"

namespace nabla::opkit {

// A float64 input drawn uniformly from [low, high) whose gradient is checked.
inline GradCheckInput CheckInput(std::string slot, Shape shape, double low = -1.0, double high = 1.0) {
  GradCheckInput in;
  in.slot = std::move(slot);
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}

// An input whose gradient is not checked (labels, soft targets).
inline GradCheckInput NoCheck(GradCheckInput in) {
  in.check = false;
  return in;
}

// The input kept `margin` away from the points where the op has a kink.
inline GradCheckInput AwayFromKinks(GradCheckInput in, std::vector<double> kinks, double margin) {
  in.kinks = std::move(kinks);
  in.kink_margin = margin;
  return in;
}

// int64 class or row indices in [0, high), or the given values; unchecked.
inline GradCheckInput IndexIn(std::string slot, Shape shape, int64_t high, std::vector<double> values = {}) {
  GradCheckInput in = NoCheck(CheckInput(std::move(slot), std::move(shape), 0.0, static_cast<double>(high)));
  in.dtype = DType::kInt64;
  in.values = std::move(values);
  return in;
}

// A case named `name` over `inputs` whose outputs `outputs` are weighed.
inline GradCheckSpec CheckCase(std::string name, std::vector<GradCheckInput> inputs, AttributeMap attrs = {},
                               std::vector<std::pair<std::string, int>> outputs = {{"Out", 1}}) {
  GradCheckSpec spec;
  spec.name = std::move(name);
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.outputs = std::move(outputs);
  return spec;
}

// A grad check of a binary op with a kink where X == Y (elementwise_max,
// elementwise_min): Y holds fixed values and X keeps away from all of them,
// so no central difference straddles a tie.
inline GradCheckSpec TieFreeCase(std::string name, Shape x, Shape y, std::vector<double> y_values,
                                 AttributeMap attrs = {}) {
  GradCheckInput yin = CheckInput("Y", std::move(y));
  yin.values = y_values;
  return CheckCase(std::move(name), {AwayFromKinks(CheckInput("X", std::move(x)), std::move(y_values), 0.02), yin},
                   std::move(attrs));
}

}  // namespace nabla::opkit
