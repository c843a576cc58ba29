#pragma once
// Axis arithmetic every op that walks a tensor along one dim needs: Paddle's
// negative axes, products of dims that may be unknown (-1) at build time, and
// the [outer, dim, inner] view softmax, concat, split, stack and arg_max use.
#include <algorithm>
#include <cstdint>
#include <string>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/types.h"

namespace nabla::opkit {

// Rejects `axis` outside [-rank, rank) and maps it into [0, rank); the
// message names the attribute `attr` and `where` (e.g. "op 'softmax'").
inline int NormalizeAxis(int axis, size_t rank, const std::string& attr, const std::string& where) {
  const int r = static_cast<int>(rank);
  NABLA_ENFORCE(axis >= -r && axis < r, kOutOfRange, where, ": attribute ", attr, " must be in [", -r, ", ", r,
                ") for an input of rank ", r, ", but received ", axis);
  return axis < 0 ? axis + r : axis;
}

// Product of dims [begin, end) (clipped to the rank); -1 when any of them is
// unknown, so build-time shape inference can pass unknowns through.
inline int64_t ProductOf(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) {
    if (s[i] < 0) return -1;
    p *= s[i];
  }
  return p;
}

// True when two dims may be equal: at build time -1 matches anything.
inline bool DimsCompatible(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

// A tensor seen as [outer, dim, inner] around one axis (already normalized):
// row-major memory walks as outer blocks of `dim` strides of `inner`.
struct AxisView {
  int64_t outer, dim, inner;
};

inline AxisView ViewAround(const Shape& shape, int axis) {
  return {ProductOf(shape, 0, axis), shape[axis], ProductOf(shape, axis + 1, shape.size())};
}

// f(row, base) for every row along the axis, split over the executor's
// threads: there are outer * inner rows, and row `row` holds the elements
// base + d * inner for d in [0, dim) (softmax-like ops normalise each row).
template <typename F>
void ForEachAxisRow(const AxisView& v, F&& f) {
  if (v.dim == 0) return;  // no elements, though outer * inner rows may be > 0
  cpu::ParallelFor(v.outer * v.inner, cpu::GrainForRows(v.dim), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) f(row, (row / v.inner) * v.dim * v.inner + row % v.inner);
  });
}

// A part along one axis of a whole (concat's inputs, split's outputs): per
// outer index, `chunk` contiguous elements of the part sit at `offset` in a
// row of `row` elements of the whole. The copies between them both ways:
template <typename T>
void CopyPartFromWhole(const T* whole, int64_t outer, int64_t row, int64_t offset, int64_t chunk, T* part) {
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = whole + o * row + offset;
    std::copy(src, src + chunk, part + o * chunk);
  }
}
template <typename T>
void CopyPartToWhole(const T* part, int64_t outer, int64_t row, int64_t offset, int64_t chunk, T* whole) {
  for (int64_t o = 0; o < outer; ++o) std::copy(part + o * chunk, part + (o + 1) * chunk, whole + o * row + offset);
}

}  // namespace nabla::opkit
