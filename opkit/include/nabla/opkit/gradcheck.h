#pragma once
// Builders of GradCheckSpec cases (`nabla gradcheck`, the op test table):
// inputs drawn from a range, kept off kinks, fixed, unchecked or integer.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/gradcheck.h"
#include "nabla/types.h"

namespace nabla::opkit {

// A float64 input drawn uniformly from [low, high) whose gradient is checked.
GradCheckInput CheckInput(std::string slot, Shape shape, double low = -1.0, double high = 1.0);

// An input whose gradient is not checked (labels, soft targets).
GradCheckInput NoCheck(GradCheckInput in);

// The input kept `margin` away from the points where the op has a kink.
GradCheckInput AwayFromKinks(GradCheckInput in, std::vector<double> kinks, double margin);

// int64 class or row indices in [0, high), or the given values; unchecked.
GradCheckInput IndexIn(std::string slot, Shape shape, int64_t high, std::vector<double> values = {});

// A case named `name` over `inputs` whose outputs `outputs` are weighed.
GradCheckSpec CheckCase(std::string name, std::vector<GradCheckInput> inputs, AttributeMap attrs = {},
                        std::vector<std::pair<std::string, int>> outputs = {{"Out", 1}});

// A grad check of a binary op with a kink where X == Y (elementwise_max,
// elementwise_min): Y holds fixed values and X keeps away from all of them,
// so no central difference straddles a tie.
GradCheckSpec TieFreeCase(std::string name, Shape x, Shape y, std::vector<double> y_values, AttributeMap attrs = {});

}  // namespace nabla::opkit
