#include "nabla/opkit/gradcheck.h"

namespace nabla::opkit {

GradCheckInput CheckInput(std::string slot, Shape shape, double low, double high) {
  GradCheckInput in;
  in.slot = std::move(slot);
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}

GradCheckInput NoCheck(GradCheckInput in) {
  in.check = false;
  return in;
}

GradCheckInput AwayFromKinks(GradCheckInput in, std::vector<double> kinks, double margin) {
  in.kinks = std::move(kinks);
  in.kink_margin = margin;
  return in;
}

GradCheckInput IndexIn(std::string slot, Shape shape, int64_t high, std::vector<double> values) {
  GradCheckInput in = NoCheck(CheckInput(std::move(slot), std::move(shape), 0.0, static_cast<double>(high)));
  in.dtype = DType::kInt64;
  in.values = std::move(values);
  return in;
}

GradCheckSpec CheckCase(std::string name, std::vector<GradCheckInput> inputs, AttributeMap attrs,
                        std::vector<std::pair<std::string, int>> outputs) {
  GradCheckSpec spec;
  spec.name = std::move(name);
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.outputs = std::move(outputs);
  return spec;
}

GradCheckSpec TieFreeCase(std::string name, Shape x, Shape y, std::vector<double> y_values, AttributeMap attrs) {
  GradCheckInput yin = CheckInput("Y", std::move(y));
  yin.values = y_values;
  return CheckCase(std::move(name), {AwayFromKinks(CheckInput("X", std::move(x)), std::move(y_values), 0.02), yin},
                   std::move(attrs));
}

}  // namespace nabla::opkit
