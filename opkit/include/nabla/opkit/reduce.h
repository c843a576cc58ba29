#pragma once
// Index plans of reductions: which dims a `dim`/`reduce_all` pair reduces,
// the shapes that result, and walks that sum into a broadcast operand in a
// fixed order, so results are bit for bit the same with any thread count.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/opkit/axis.h"
#include "nabla/opkit/vectorized.h"
#include "nabla/types.h"

namespace nabla::opkit {

// The reduced dims of `x` as a mask (negative dims count from the end; an
// empty list or reduce_all reduces everything).
inline std::vector<bool> ReducedDims(const Shape& x, const std::vector<int>& dims, bool reduce_all,
                                     const std::string& where) {
  std::vector<bool> mask(x.size(), reduce_all || dims.empty());
  if (!reduce_all)
    for (int d : dims) mask[NormalizeAxis(d, x.size(), "dim", where)] = true;
  return mask;
}

// Shape of the reduction with the reduced dims kept as 1.
inline Shape KeepDimShape(const Shape& x, const std::vector<bool>& mask) {
  Shape s = x;
  for (size_t i = 0; i < s.size(); ++i)
    if (mask[i]) s[i] = 1;
  return s;
}

// The output shape: keep_dim keeps 1s, otherwise reduced dims go, and a full
// reduction gives [1] (Paddle's convention: never rank 0).
inline Shape ReducedShape(const Shape& x, const std::vector<bool>& mask, bool keep_dim) {
  if (keep_dim) return KeepDimShape(x, mask);
  Shape s;
  for (size_t i = 0; i < x.size(); ++i)
    if (!mask[i]) s.push_back(x[i]);
  if (s.empty()) s.push_back(1);
  return s;
}

namespace reduce_detail {

// Multiplies out's dims (size-1 dims aside) into *before, *stretch and
// *after: the stretch is the dims where in_stretch(k) holds, the others fall
// before or after it. False if the stretch's dims are not contiguous.
template <typename InStretch>
bool AroundStretch(const Shape& out, InStretch&& in_stretch, int64_t* before, int64_t* stretch, int64_t* after) {
  int stage = 0;  // 0: before the stretch, 1: in it, 2: after it
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k] == 1) continue;
    if (in_stretch(k)) {
      if (stage == 2) return false;
      stage = 1;
      *stretch *= out[k];
    } else {
      if (stage == 1) stage = 2;
      *(stage == 0 ? before : after) *= out[k];
    }
  }
  return true;
}

}  // namespace reduce_detail

// `out` seen as [outer, r, inner] around the one stretch of dims along which
// operand `a` (out's rank, 1 or out's dim everywhere) is broadcast; then a is
// [outer, inner] in memory. MakeReduceView is false when a is broadcast along
// two separate stretches (those go the serial way). No broadcast: r = 1.
struct ReduceView {
  int64_t outer = 1, r = 1, inner = 1;
};
inline bool MakeReduceView(const Shape& out, const Shape& a, ReduceView* v) {
  *v = ReduceView{};  // nothing reduced: every element is its own output (outer)
  return reduce_detail::AroundStretch(
      out, [&](size_t k) { return a[k] == 1; }, &v->outer, &v->r, &v->inner);
}

// `out` seen as [before, span, after] around the one stretch of dims where
// operand `a` (out's rank, 1 or out's dim everywhere) is not broadcast: a
// is [span] in memory, reduced over before and after (a conv's bias, [C]
// added to [N, C, H, W], which ReduceView cannot take). False when a's
// dims are not one stretch.
struct SpanView {
  int64_t before = 1, span = 1, after = 1;
};
inline bool MakeSpanView(const Shape& out, const Shape& a, SpanView* v) {
  *v = SpanView{};
  return reduce_detail::AroundStretch(
      out, [&](size_t k) { return a[k] != 1; }, &v->before, &v->span, &v->after);
}

// Calls f(io, ia) for every element io of out (seen as [outer, r, inner])
// with ia = the element of the broadcast operand it reduces into, split over
// the operand's elements with cpu::ParallelFor: each operand element is
// visited by one chunk, over r in ascending order as a serial row-major walk
// does, so sums come out bit for bit the same with any number of threads.
template <typename F>
void ParallelReduceWalk(const ReduceView& v, F&& f) {
  const int64_t positions = v.outer * v.inner;
  const int64_t r = v.r, inner = v.inner;
  VectorizedParallelFor(positions, cpu::GrainForRows(r), [&](int64_t p0, int64_t p1) {
    for (int64_t o = p0 / inner; o * inner < p1; ++o) {
      const int64_t i0 = std::max(p0, o * inner) - o * inner;
      const int64_t i1 = std::min(p1, (o + 1) * inner) - o * inner;
      const int64_t ia0 = o * inner;
      for (int64_t k = 0; k < r; ++k) {
        const int64_t base = (o * r + k) * inner;
        for (int64_t i = i0; i < i1; ++i) f(base + i, ia0 + i);
      }
    }
  });
}

// ParallelReduceWalk by contiguous spans, for loops that vectorize: calls
// f(io, ia, i0, i1) for the elements io + i of out and ia + i of the operand,
// i in [i0, i1), in the same order and split as ParallelReduceWalk visits
// them (so the same sums, bit for bit).
template <typename F>
void ParallelReduceWalkSpans(const ReduceView& v, F&& f) {
  const int64_t positions = v.outer * v.inner;
  const int64_t r = v.r, inner = v.inner;
  VectorizedParallelFor(positions, cpu::GrainForRows(r), [&](int64_t p0, int64_t p1) {
    for (int64_t o = p0 / inner; o * inner < p1; ++o) {
      const int64_t i0 = std::max(p0, o * inner) - o * inner;
      const int64_t i1 = std::min(p1, (o + 1) * inner) - o * inner;
      for (int64_t k = 0; k < r; ++k) f((o * r + k) * inner, o * inner, i0, i1);
    }
  });
}

// Calls f(io, ia) for every row of `inner` contiguous elements of out
// (seen as [outer, r, inner]), io its first element and ia the first of the
// operand's matching row, split over rows: for elementwise work beside a
// reduction, which needs no order.
template <typename F>
void ForEachReducedRow(const ReduceView& v, F&& f) {
  const int64_t rows = v.outer * v.r;
  VectorizedParallelFor(rows, cpu::GrainForRows(v.inner), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) f(row * v.inner, (row / v.r) * v.inner);
  });
}

// A sum of n terms term(i) in Acc, in fixed blocks: the blocks' partial sums
// are added in block order, so the result depends on n only, never on the
// number of threads. Within a block, term(i) goes to lane i % 8 and the lanes
// are added last: independent adds, where one accumulator would make a chain
// of dependent ones (4 cycles an element).
template <typename Acc, typename Term>
Acc DeterministicSum(int64_t n, Term&& term) {
  constexpr int64_t kBlock = 4 * cpu::kParallelGrain;
  constexpr int64_t kLanes = 8;
  static_assert(kBlock % kLanes == 0, "a block starts at lane 0");
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto block_sum = [&](int64_t b) {
    Acc lane[kLanes] = {};
    int64_t i = b * kBlock;
    const int64_t e = std::min(n, (b + 1) * kBlock);
    for (; i + kLanes <= e; i += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) lane[k] += term(i + k);
    for (int64_t k = 0; i < e; ++i, ++k) lane[k] += term(i);
    Acc acc = Acc(0);
    for (Acc a : lane) acc += a;
    return acc;
  };
  if (blocks <= 1) return n > 0 ? block_sum(0) : Acc(0);
  std::vector<Acc> partial(static_cast<size_t>(blocks));
  cpu::ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) partial[static_cast<size_t>(b)] = block_sum(b);
  });
  Acc acc = Acc(0);
  for (Acc p : partial) acc += p;
  return acc;
}

}  // namespace nabla::opkit
