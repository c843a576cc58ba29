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

bool MakeReduceView(const Shape& out, const Shape& a, ReduceView* v) {
  *v = ReduceView{};
  int stage = 0;  // 0: before the reduced stretch, 1: in it, 2: after it
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k] == 1) continue;
    bool reduced = a[k] == 1;
    if (reduced) {
      if (stage == 2) return false;
      stage = 1;
      v->r *= out[k];
    } else {
      if (stage == 1) stage = 2;
      (stage == 0 ? v->outer : v->inner) *= out[k];
    }
  }
  if (stage == 0) v->inner = 1;  // nothing reduced: every element is its own output
  return true;
}

bool MakeSpanView(const Shape& out, const Shape& a, SpanView* v) {
  *v = SpanView{};
  int stage = 0;  // 0: before a's stretch, 1: in it, 2: after it
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k] == 1) continue;
    if (a[k] != 1) {
      if (stage == 2) return false;
      stage = 1;
      v->span *= out[k];
    } else {
      if (stage == 1) stage = 2;
      (stage == 0 ? v->before : v->after) *= out[k];
    }
  }
  return true;
}

}  // namespace nabla::opkit
