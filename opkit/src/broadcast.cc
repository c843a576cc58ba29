#include "nabla/opkit/broadcast.h"

#include "nabla/error.h"
#include "nabla/program.h"

namespace nabla::opkit {

Alignment AlignAtAxis(const Shape& small_in, size_t rank, int axis) {
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

namespace {
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
}  // namespace

BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const std::string& where) {
  return Broadcast(x, y, axis, [&] { return where; });
}

BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const OpDesc& op) {
  return Broadcast(x, y, axis, [&] { return StrCat("op '", op.Type(), "'"); });
}

BroadcastIndexer::BroadcastIndexer(const Shape& out, const Shape& a, const Shape& b) {
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

}  // namespace nabla::opkit
