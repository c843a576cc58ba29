#pragma once
// One-element tensors (learning rates, Beta1Pow, counters) and index inputs
// (Label, Ids, Indices), read whatever their dtype within the accepted set.
// Header-only, so plugins on the C ABI (nabla/sdk/opkit.h) use it too.
#include <cstdint>
#include <string>

#include "nabla/error.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::opkit {

// The element of a one-element float32 or float64 tensor: optimizer inputs
// often mix float32 scalars with float64 parameters. Errors name op and slot.
inline double ReadScalar(const Tensor& t, const std::string& op, const std::string& slot) {
  NABLA_ENFORCE(t.Numel() == 1, kInvalidArgument, "op '", op, "': input ", slot,
                " must hold exactly one element, but received shape ", ShapeToString(t.GetShape()));
  switch (t.GetDType()) {
    case DType::kFloat32:
      return t.Data<float>()[0];
    case DType::kFloat64:
      return t.Data<double>()[0];
    default:
      NABLA_THROW(kInvalidArgument, "op '", op, "': input ", slot, " must be float32 or float64, but received ",
                  DTypeName(t.GetDType()));
  }
}

// Writes `value` into a one-element tensor of dtype float32 or float64.
inline void WriteScalar(Tensor& t, double value) {
  if (t.GetDType() == DType::kFloat64)
    t.MutableData<double>()[0] = value;
  else
    t.MutableData<float>()[0] = static_cast<float>(value);
}

// Index inputs are int64 as in Paddle; int32 is accepted too because feeds
// from NumPy are often int32.
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.GetDType() == DType::kInt32 ? static_cast<int64_t>(t.Data<int32_t>()[i]) : t.Data<int64_t>()[i];
}
// IndexAt for a loop over an index tensor: its dtype and data are looked
// up once (over the C ABI each lookup is a call through the table).
class IndexReader {
 public:
  explicit IndexReader(const Tensor& t) : t_(&t), dtype_(t.GetDType()) {
    if (dtype_ == DType::kInt32) p32_ = t.Data<int32_t>();
    if (dtype_ == DType::kInt64) p64_ = t.Data<int64_t>();
  }
  int64_t operator[](int64_t i) const {
    if (dtype_ == DType::kInt32) return p32_[i];
    if (dtype_ == DType::kInt64) return p64_[i];
    return t_->Data<int64_t>()[i];  // not an index tensor: IndexAt's error
  }

 private:
  const Tensor* t_;
  DType dtype_;
  const int32_t* p32_ = nullptr;
  const int64_t* p64_ = nullptr;
};

inline void EnforceIndexDType(DType d, const std::string& where, const std::string& slot) {
  NABLA_ENFORCE(d == DType::kInt64 || d == DType::kInt32, kInvalidArgument, where, ": input ", slot,
                " must be int64 (or int32), but received ", DTypeName(d));
}

inline void EnforceFloatDType(DType d, const std::string& where, const std::string& slot) {
  NABLA_ENFORCE(IsFloating(d), kInvalidArgument, where, ": input ", slot, " must be float32 or float64, but received ",
                DTypeName(d));
}

}  // namespace nabla::opkit
