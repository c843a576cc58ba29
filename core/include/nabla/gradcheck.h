#pragma once
// Numeric gradient checking (Paddle's check_grad rule): float64 central
// differences against the op's own grad ops, exactly as its GradOpDescMaker
// emits them. Each op declares its check cases next to its registration
// (OpBuilder::GradCheck), so `nabla gradcheck` and the op test table run the
// same cases.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/export.h"
#include "nabla/types.h"

namespace nabla {

class Device;

// One input var of a check case.
struct GradCheckInput {
  std::string slot;
  Shape shape;
  DType dtype = DType::kFloat64;  // float inputs are always checked in float64
  double low = -1.0, high = 1.0;  // uniform values in [low, high) (ints: [low, high))
  // Keeps values at least this far from the kinks (relu at 0, abs at 0, ...).
  std::vector<double> kinks;
  double kink_margin = 0.0;
  // Fixed values instead of random ones (row-major).
  std::vector<double> values;
  bool check = true;  // compute and check this input's gradient
  int count = 1;      // vars in the slot (duplicable slots)
};

struct GradCheckSpec {
  std::string name;  // case label, e.g. "broadcast_axis1"
  std::vector<GradCheckInput> inputs;
  std::vector<std::pair<std::string, int>> outputs;  // (slot, number of vars)
  // Output slots whose gradient is not fed (e.g. a Mask or an integer output).
  std::vector<std::string> no_grad_outputs;
  AttributeMap attrs;
  double max_relative_error = 0.005;
  double abs_threshold = 1e-3;  // below it the error is absolute
  double delta = 1e-5;          // finite difference step
};

struct GradCheckResult {
  std::string op_type;
  std::string case_name;
  bool ok = true;
  double max_error = 0.0;             // worst error, relative or absolute per the rule
  std::vector<std::string> failures;  // one line per bad gradient element summary
};

// Runs one check case of `op_type` on `device` (its kernels for float64).
NABLA_API GradCheckResult CheckGradient(const std::string& op_type, const GradCheckSpec& spec, Device& device,
                                        uint64_t seed = 1);
// All cases of one op. An op whose maker emits grad ops but that declares no
// case gets one failing result; ops that run sub-blocks (checked through
// programs) and ops without gradient get none.
NABLA_API std::vector<GradCheckResult> CheckOpGradients(const std::string& op_type, Device& device);

}  // namespace nabla
