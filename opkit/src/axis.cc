#include "nabla/opkit/axis.h"

#include "nabla/error.h"

namespace nabla::opkit {

int NormalizeAxis(int axis, size_t rank, const std::string& attr, const std::string& where) {
  const int r = static_cast<int>(rank);
  NABLA_ENFORCE(axis >= -r && axis < r, kOutOfRange, where, ": attribute ", attr, " must be in [", -r, ", ", r,
                ") for an input of rank ", r, ", but received ", axis);
  return axis < 0 ? axis + r : axis;
}

}  // namespace nabla::opkit
