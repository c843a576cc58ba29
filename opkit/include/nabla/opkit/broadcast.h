#pragma once
// Paddle's elementwise broadcasting (the `axis` rule) and the index walk that
// pairs each output element with its operands' elements. Elementwise ops use
// both for forward and gradient; reductions use the walk with a keep_dim
// output as the operand broadcast along the reduced dims.
#include <cstdint>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/cpu/simd.h"
#include "nabla/types.h"

namespace nabla {
class OpDesc;
}

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
Alignment AlignAtAxis(const Shape& small, size_t rank, int axis);

// Paddle's elementwise rule: the lower-rank operand is aligned with the
// other (AlignAtAxis); then each dim pair must be equal or contain a 1 (-1
// means unknown at build time). `x` and `y` come back padded to out's rank.
struct BroadcastShapes {
  Shape x, y, out;
};
BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const std::string& where);
// For kernels: the error names op `op`, and a call that fits builds no
// string (the prefix cost more than the add in small ops).
BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const OpDesc& op);

// Walks every element of `out` together with the matching element of two
// operands whose shapes have out's rank and equal out's dims or are 1 there.
class BroadcastIndexer {
 public:
  BroadcastIndexer(const Shape& out, const Shape& a, const Shape& b);

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
      // Unit strides (no broadcast along the last dim) get their own loop,
      // which vectorizes.
      if (ia_step == 1 && ib_step == 1)
        for (int64_t k = 0; k < inner; ++k) f(io + k, ia + k, ib + k);
      else
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
  // vector width (cpu::RunSimd); f must only write output-indexed (or
  // otherwise disjoint) elements.
  template <typename F>
  void ParallelForEach(F&& f) const {
    cpu::ParallelFor(Rows(), cpu::GrainForRows(Inner()),
                     [&](int64_t b, int64_t e) { cpu::RunSimd([&] { ForEachRows(b, e, f); }); });
  }

 private:
  // Size-1 dims dropped and neighbours merged where both operands stay
  // contiguous, so the inner loop runs over as long a stretch as possible.
  std::vector<int64_t> dims_, a_strides_, b_strides_;
  int64_t total_ = 1;
};

}  // namespace nabla::opkit
