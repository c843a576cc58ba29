#pragma once
// One-element tensors (learning rates, Beta1Pow, counters) and index inputs
// (Label, Ids, Indices), read whatever their dtype within the accepted set.
#include <cstdint>
#include <string>

#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::opkit {

// The element of a one-element float32 or float64 tensor: optimizer inputs
// often mix float32 scalars with float64 parameters. Errors name op and slot.
double ReadScalar(const Tensor& t, const std::string& op, const std::string& slot);

// Writes `value` into a one-element tensor of dtype float32 or float64.
void WriteScalar(Tensor& t, double value);

// Index inputs are int64 as in Paddle; int32 is accepted too because feeds
// from NumPy are often int32.
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.GetDType() == DType::kInt32 ? static_cast<int64_t>(t.Data<int32_t>()[i]) : t.Data<int64_t>()[i];
}

void EnforceIndexDType(DType d, const std::string& where, const std::string& slot);
void EnforceFloatDType(DType d, const std::string& where, const std::string& slot);

}  // namespace nabla::opkit
