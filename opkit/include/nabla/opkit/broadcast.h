#pragma once
// Paddle's elementwise broadcasting (the `axis` rule) and the index walk that
// pairs each output element with its operands' elements. Elementwise ops use
// both for forward and gradient; reductions use the walk with a keep_dim
// output as the operand broadcast along the reduced dims.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/opkit/vectorized.h"
#include "nabla/program.h"  // OpDesc, for the error's op name
#include "nabla/types.h"

namespace nabla::opkit {

// `small` aligned with the dims of a rank-`rank` shape starting at `axis`
// (-1: at the end, numpy style), trailing 1s dropped where they would not
// fit, then padded with 1s to `rank`. `fits` is false when no alignment
// exists; callers word the error, since their rules differ beyond alignment.
struct Alignment {
  bool fits = false;
  int axis = 0;     // the resolved axis (-1 replaced)
  size_t kept = 0;  // dims of `small` left after dropping trailing 1s
  Shape padded;     // `small` at rank `rank`
};
inline Alignment AlignAtAxis(const Shape& small_in, size_t rank, int axis) {
  Shape small = small_in;
  Alignment a;
  if (axis == -1) axis = static_cast<int>(rank) - static_cast<int>(small.size());
  while (axis >= 0 && static_cast<size_t>(axis) + small.size() > rank && !small.empty() && small.back() == 1)
    small.pop_back();
  a.axis = axis;
  a.kept = small.size();
  a.fits = axis >= 0 && static_cast<size_t>(axis) + small.size() <= rank;
  if (!a.fits) return a;
  a.padded.assign(rank, 1);
  for (size_t i = 0; i < small.size(); ++i) a.padded[axis + i] = small[i];
  return a;
}

// Paddle's elementwise rule: the lower-rank operand is aligned with the
// other (AlignAtAxis); then each dim pair must be equal or contain a 1 (-1
// means unknown at build time). `x` and `y` come back padded to out's rank.
struct BroadcastShapes {
  Shape x, y, out;
};

namespace broadcast_detail {
// `where()` runs only on the error paths.
template <typename Where>
BroadcastShapes Broadcast(const Shape& x, const Shape& y, int axis, const Where& where) {
  bool x_big = x.size() >= y.size();
  const Shape& big = x_big ? x : y;
  const Shape& small = x_big ? y : x;
  size_t rank = big.size();
  Alignment al = AlignAtAxis(small, rank, axis);
  NABLA_ENFORCE(al.fits, kInvalidArgument, where(), ": attribute axis must be in [0, ", rank - al.kept, "] to align ",
                x_big ? "Y" : "X", " (shape ", ShapeToString(small), ") with ", x_big ? "X" : "Y", " (shape ",
                ShapeToString(big), "), but received ", al.axis);
  axis = al.axis;
  BroadcastShapes r;
  r.x = x_big ? big : al.padded;
  r.y = x_big ? al.padded : big;
  r.out.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = r.x[i], b = r.y[i];
    if (a == b) {
      r.out[i] = a;
    } else if (a == 1) {
      r.out[i] = b;
    } else if (b == 1) {
      r.out[i] = a;
    } else if (a < 0 || b < 0) {
      r.out[i] = a < 0 ? b : a;
    } else {
      NABLA_THROW(kInvalidArgument, where(), ": X and Y cannot be broadcast with axis ", axis,
                  ": expected equal dims or a 1 at every aligned position, but received X shape ", ShapeToString(x),
                  " and Y shape ", ShapeToString(y), " (dim ", i, ": ", a, " vs ", b, ")");
    }
  }
  return r;
}
}  // namespace broadcast_detail

inline BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const std::string& where) {
  return broadcast_detail::Broadcast(x, y, axis, [&] { return where; });
}
// For kernels: the error names op `op`, and a call that fits builds no
// string (the prefix cost more than the add in small ops).
inline BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const OpDesc& op) {
  return broadcast_detail::Broadcast(x, y, axis, [&] { return StrCat("op '", op.Type(), "'"); });
}
// The same from a kernel's context, whose op is looked at only for the
// error: over the C ABI, ExecutionContext::Op() copies the op through the
// table, which cost more than a small op's work.
template <typename Ctx, typename = decltype(std::declval<const Ctx&>().Op())>
BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const Ctx& ctx) {
  return broadcast_detail::Broadcast(x, y, axis, [&] { return StrCat("op '", ctx.Op().Type(), "'"); });
}

// Walks every element of `out` together with the matching element of two
// operands whose shapes have out's rank and equal out's dims or are 1 there.
class BroadcastIndexer {
 public:
  BroadcastIndexer(const Shape& out, const Shape& a, const Shape& b) {
    size_t rank = out.size();
    std::vector<int64_t> sa(rank), sb(rank);
    int64_t ca = 1, cb = 1;
    for (size_t k = rank; k-- > 0;) {
      sa[k] = a[k] == out[k] ? ca : 0;
      sb[k] = b[k] == out[k] ? cb : 0;
      ca *= a[k];
      cb *= b[k];
      total_ *= out[k];
    }
    for (size_t k = 0; k < rank; ++k) {
      if (out[k] == 1) continue;
      if (!dims_.empty() && a_strides_.back() == sa[k] * out[k] && b_strides_.back() == sb[k] * out[k]) {
        dims_.back() *= out[k];
        a_strides_.back() = sa[k];
        b_strides_.back() = sb[k];
      } else {
        dims_.push_back(out[k]);
        a_strides_.push_back(sa[k]);
        b_strides_.push_back(sb[k]);
      }
    }
  }

  int64_t Total() const { return total_; }

  // The walk is `Rows()` stretches of `Inner()` contiguous output elements.
  int64_t Inner() const { return dims_.empty() ? 1 : dims_.back(); }
  int64_t Rows() const { return total_ == 0 ? 0 : total_ / Inner(); }

  // f(i_out, i_a, i_b) for every output element, in row-major order.
  template <typename F>
  void ForEach(F&& f) const {
    ForEachRows(0, Rows(), f);
  }

  // The same for the output elements of rows [row_begin, row_end) only, so
  // disjoint row ranges can run in parallel.
  template <typename F>
  void ForEachRows(int64_t row_begin, int64_t row_end, F&& f) const {
    if (total_ == 0 || row_begin >= row_end) return;
    if (dims_.empty()) {
      f(int64_t{0}, int64_t{0}, int64_t{0});
      return;
    }
    size_t last = dims_.size() - 1;
    int64_t inner = dims_[last], ia_step = a_strides_[last], ib_step = b_strides_[last];
    // The multi-index of row_begin over the outer dims.
    std::vector<int64_t> idx(last, 0);
    int64_t io = row_begin * inner, ia = 0, ib = 0;
    for (size_t d = last, rest = static_cast<size_t>(row_begin); d-- > 0;) {
      idx[d] = static_cast<int64_t>(rest % static_cast<size_t>(dims_[d]));
      rest /= static_cast<size_t>(dims_[d]);
      ia += idx[d] * a_strides_[d];
      ib += idx[d] * b_strides_[d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      for (int64_t k = 0; k < inner; ++k) f(io + k, ia + k * ia_step, ib + k * ib_step);
      io += inner;
      for (size_t d = last; d-- > 0;) {
        ia += a_strides_[d];
        ib += b_strides_[d];
        if (++idx[d] < dims_[d]) break;
        ia -= a_strides_[d] * dims_[d];
        ib -= b_strides_[d] * dims_[d];
        idx[d] = 0;
      }
    }
  }

  // Runs ForEach's calls split over rows with cpu::ParallelFor, at the CPU's
  // vector width (vectorized.h); f must only write output-indexed (or
  // otherwise disjoint) elements.
  template <typename F>
  void ParallelForEach(F&& f) const {
    VectorizedParallelFor(Rows(), cpu::GrainForRows(Inner()), [&](int64_t b, int64_t e) { ForEachRows(b, e, f); });
  }

 private:
  // Size-1 dims dropped and neighbours merged where both operands stay
  // contiguous, so the inner loop runs over as long a stretch as possible.
  std::vector<int64_t> dims_, a_strides_, b_strides_;
  int64_t total_ = 1;
};

}  // namespace nabla::opkit
