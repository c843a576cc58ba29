#include "control_flow_util.h"

namespace nabla::control_flow {

namespace {

// Y's shape padded with 1s to X's rank, aligned at `axis`.
Shape AlignY(const Shape& x, const Shape& y, int axis, const std::string& where) {
  const size_t rank = x.size();
  NABLA_ENFORCE(y.size() <= rank || NumElements(y) == 1, kInvalidArgument, where,
                ": Y must not have more dims than X, but received X shape ", ShapeToString(x), " and Y shape ",
                ShapeToString(y));
  // One element of higher rank: broadcast everywhere.
  Alignment al = AlignAtAxis(y.size() > rank ? Shape{} : y, rank, axis);
  NABLA_ENFORCE(al.fits, kInvalidArgument, where, ": attribute axis must be in [0, ", rank - al.kept,
                "] to align Y (shape ", ShapeToString(y), ") with X (shape ", ShapeToString(x), "), but received ",
                axis);
  const Shape& padded = al.padded;
  for (size_t i = 0; i < rank; ++i)
    NABLA_ENFORCE(padded[i] == x[i] || padded[i] == 1 || padded[i] < 0 || x[i] < 0, kInvalidArgument, where,
                  ": Y cannot be broadcast onto X with axis ", axis,
                  ": expected each aligned dim of Y to equal X's "
                  "or be 1, but received X shape ",
                  ShapeToString(x), " and Y shape ", ShapeToString(y));
  return padded;
}

}  // namespace

void CheckBroadcast(const Shape& x, const Shape& y, int axis, const std::string& where) { AlignY(x, y, axis, where); }

std::vector<int64_t> BroadcastYOntoX(const Shape& x, const Shape& y, int axis, const std::string& where) {
  std::vector<int64_t> index(static_cast<size_t>(NumElements(x)));
  BroadcastIndexer(x, x, AlignY(x, y, axis, where)).ForEach([&](int64_t io, int64_t, int64_t iy) {
    index[static_cast<size_t>(io)] = iy;
  });
  return index;
}

size_t ReadArrayIndex(const Tensor& t, const std::string& where) {
  NABLA_ENFORCE((t.GetDType() == DType::kInt64 || t.GetDType() == DType::kInt32) && t.Numel() == 1, kInvalidArgument,
                where, ": I must be an int64 (or int32) tensor with exactly one element, but received ",
                t.DebugString());
  int64_t i = t.GetDType() == DType::kInt64 ? *t.Data<int64_t>() : *t.Data<int32_t>();
  NABLA_ENFORCE(i >= 0, kOutOfRange, where, ": array index I must be >= 0, but received ", i);
  return static_cast<size_t>(i);
}

void CheckIndexSlot(InferShapeContext& c, const std::string& slot) {
  DType d = c.InputDType(slot);
  Shape s = c.InputShape(slot);
  NABLA_ENFORCE(d == DType::kInt64 || d == DType::kInt32, kInvalidArgument, c.Where(), ": ", slot,
                " must be an int64 (or int32) tensor with exactly one element, but received dtype ", DTypeName(d));
  NABLA_ENFORCE(NumElements(s) < 0 || NumElements(s) == 1, kInvalidArgument, c.Where(), ": ", slot,
                " must hold exactly one element, but received shape ", ShapeToString(s));
}

}  // namespace nabla::control_flow
