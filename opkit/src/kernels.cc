#include "nabla/opkit/kernels.h"

#include "nabla/error.h"
#include "nabla/opkit/scalar.h"

namespace nabla::opkit {

double ReadScalar(const Tensor& t, const std::string& op, const std::string& slot) {
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

void WriteScalar(Tensor& t, double value) {
  if (t.GetDType() == DType::kFloat64)
    t.MutableData<double>()[0] = value;
  else
    t.MutableData<float>()[0] = static_cast<float>(value);
}

void EnforceIndexDType(DType d, const std::string& where, const std::string& slot) {
  NABLA_ENFORCE(d == DType::kInt64 || d == DType::kInt32, kInvalidArgument, where, ": input ", slot,
                " must be int64 (or int32), but received ", DTypeName(d));
}

void EnforceFloatDType(DType d, const std::string& where, const std::string& slot) {
  NABLA_ENFORCE(IsFloating(d), kInvalidArgument, where, ": input ", slot, " must be float32 or float64, but received ",
                DTypeName(d));
}

}  // namespace nabla::opkit
