#pragma once
// transpose's permutation (transpose_op.cc, and its OpenCL kernel in
// transpose_opencl.cc): the check of `axis`, and Out's shape with X's
// strides permuted to Out's dims.
#include <cstdint>
#include <string>
#include <vector>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {

inline void CheckPermutation(const std::vector<int>& axis, size_t rank, const std::string& where) {
  std::vector<bool> seen(rank, false);
  bool ok = axis.size() == rank;
  for (size_t i = 0; ok && i < axis.size(); ++i) {
    ok = axis[i] >= 0 && static_cast<size_t>(axis[i]) < rank && !seen[axis[i]];
    if (ok) seen[axis[i]] = true;
  }
  NABLA_ENFORCE(ok, kInvalidArgument, where, ": attribute axis must be a permutation of 0..", rank - 1,
                " for X of rank ", rank, ", but received ", AttrToString(Attribute(axis)));
}

// Out's shape (X's dim axis[k] at position k) and, for each of Out's dims,
// X's stride along it: Out's elements in order read X at these steps.
struct Permuted {
  Shape out;
  std::vector<int64_t> steps;
};
inline Permuted PermuteDims(const Shape& xs, const std::vector<int>& axis) {
  const size_t rank = xs.size();
  std::vector<int64_t> x_strides(rank, 1);
  for (size_t k = rank; k-- > 1;) x_strides[k - 1] = x_strides[k] * xs[k];
  Permuted p{Shape(rank), std::vector<int64_t>(rank)};
  for (size_t k = 0; k < rank; ++k) {
    p.out[k] = xs[axis[k]];
    p.steps[k] = x_strides[axis[k]];
  }
  return p;
}

}  // namespace nabla::math_ops
