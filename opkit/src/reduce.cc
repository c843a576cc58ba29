#include "nabla/opkit/reduce.h"

#include "nabla/opkit/axis.h"

namespace nabla::opkit {

std::vector<bool> ReducedDims(const Shape& x, const std::vector<int>& dims, bool reduce_all, const std::string& where) {
  std::vector<bool> mask(x.size(), reduce_all || dims.empty());
  if (!reduce_all)
    for (int d : dims) mask[NormalizeAxis(d, x.size(), "dim", where)] = true;
  return mask;
}

Shape KeepDimShape(const Shape& x, const std::vector<bool>& mask) {
  Shape s = x;
  for (size_t i = 0; i < s.size(); ++i)
    if (mask[i]) s[i] = 1;
  return s;
}

Shape ReducedShape(const Shape& x, const std::vector<bool>& mask, bool keep_dim) {
  if (keep_dim) return KeepDimShape(x, mask);
  Shape s;
  for (size_t i = 0; i < x.size(); ++i)
    if (!mask[i]) s.push_back(x[i]);
  if (s.empty()) s.push_back(1);
  return s;
}

namespace {

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

}  // namespace

bool MakeReduceView(const Shape& out, const Shape& a, ReduceView* v) {
  *v = ReduceView{};  // nothing reduced: every element is its own output (outer)
  return AroundStretch(
      out, [&](size_t k) { return a[k] == 1; }, &v->outer, &v->r, &v->inner);
}

bool MakeSpanView(const Shape& out, const Shape& a, SpanView* v) {
  *v = SpanView{};
  return AroundStretch(
      out, [&](size_t k) { return a[k] != 1; }, &v->before, &v->span, &v->after);
}

}  // namespace nabla::opkit
