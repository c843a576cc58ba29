#pragma once
// Private: what the gradient check and `opcheck` (opcheck.cc) share to
// build an op's inputs from its GradCheck cases, so both draw the same
// values for the same seed.
#include <random>
#include <string>
#include <vector>

#include "nabla/device.h"
#include "nabla/gradcheck.h"
#include "nabla/tensor.h"

namespace nabla::internal {

// Allocates a fresh `t` on `device` and fills it (values converted to `dtype`).
void WriteTensor(Tensor& t, Device& device, DType dtype, const Shape& shape, const std::vector<double>& values);
// Any tensor's values as doubles, copied to the host.
std::vector<double> ReadTensor(const Tensor& t);
// Uniform values in [low, high) for one input of a case, away from its kinks
// (integers floored).
std::vector<double> RandomCaseValues(const std::string& op_type, const GradCheckSpec& case_spec,
                                     const GradCheckInput& spec, DType dtype, std::mt19937_64& rng);

}  // namespace nabla::internal
