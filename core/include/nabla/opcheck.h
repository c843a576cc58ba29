#pragma once
// `nabla opcheck`: what a plugin author runs before shipping ops. For every
// op, device and floating dtype it has kernels for, each GradCheck case the
// op registers (nabla/gradcheck.h) is run as the op and its grad ops, in
// checked mode (nabla/checked.h), and held to:
//   - shape inference: every output has the inferred shape and dtype, and no
//     kernel writes past the inferred extent (the guard canaries);
//   - its inputs: unchanged after the forward and grad kernels;
//   - its bits: the same on a second run and with other thread counts;
//   - its grad maker: every grad op it emits valid against that op's schema;
//   - its gradient: float64 central differences, and the float32 grad
//     kernels against the float64 ones;
//   - the edges: the case with its leading dim 0 (empty tensors) and 1.
// Each problem is one line; an op that declines an edge case with a clean
// error (bad argument) is not one.
#include <cstdint>
#include <string>
#include <vector>

#include "nabla/export.h"
#include "nabla/gradcheck.h"
#include "nabla/program.h"

namespace nabla {

class Device;
struct OpSchema;

struct OpCheckOptions {
  // The first count is the reference; every run is compared with it.
  std::vector<int> threads = {1, 2};
  uint64_t seed = 1;
  // Check only on this device (ResolveDevice spec); empty: every device the
  // op has kernels for.
  std::string device;
};

struct OpCheckReport {
  std::vector<std::string> problems;  // one line each, naming op, device, dtype, case and what
  std::vector<std::string> notes;     // what was not checked and why
  int runs = 0;                       // cases run (forward and grad ops, one device, dtype and variant)
};

// Checks one op (not a grad op checked through its forward op: see
// IsGradOpOfRegisteredOp). Never throws for a problem of the op's own.
NABLA_API OpCheckReport CheckOp(const std::string& type, const OpCheckOptions& options = {});

// `mul_grad` when `mul` is registered: checked as part of its forward op.
NABLA_API bool IsGradOpOfRegisteredOp(const std::string& type);

// The float32 grad kernels of one case against the float64 ones on
// `device`: the same inputs (float64 values rounded to float32), every input
// gradient within float32 round-off (relative and absolute 1e-3) of the
// float64 result. `result.failures` is empty when the op has no float32
// kernels on the device (see HasFloat32Kernels).
NABLA_API GradCheckResult CheckFloat32Gradient(const std::string& op_type, const GradCheckSpec& spec, Device& device,
                                               uint64_t seed = 1);
NABLA_API bool HasFloat32Kernels(const std::string& op_type, Device& device);

// An op's slots and attributes against `schema`: unknown or missing required
// slots, arity of non-duplicable slots, unknown, ill-typed, rejected or
// missing required attributes. Messages start with `where`.
NABLA_API void VerifyOpSchema(const OpDesc& op, const OpSchema& schema, const std::string& where);
// The attribute half of VerifyOpSchema (eager calls, whose slots are checked
// as they are bound): each attribute's checker too.
NABLA_API void VerifyOpAttrs(const OpDesc& op, const OpSchema& schema, const std::string& where);

}  // namespace nabla
