#pragma once
// slice's box (slice_op.cc, and its OpenCL kernels in slice_opencl.cc):
// where the slice starts in every dim of Input and its shape, from axes,
// starts, ends and decrease_axis by Python's clamping rules.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {

// Where the box starts in every dim of Input, and its shape before and after
// decrease_axis.
struct SliceBox {
  std::vector<int64_t> begin;
  Shape box, out;
};

// starts and ends with where they came from: StartsTensor, then
// StartsTensorList, then attribute starts (Paddle's precedence); ends alike.
struct SliceBounds {
  AttrValue<std::vector<int64_t>> starts, ends;
};

template <typename Ctx>
SliceBounds ReadBounds(const Ctx& c) {
  return {IntListAttrOrTensor(c, "StartsTensor", "StartsTensorList", "starts"),
          IntListAttrOrTensor(c, "EndsTensor", "EndsTensorList", "ends")};
}

// Python's rule for a step of 1: a negative bound counts from the end, then
// both are clamped to [0, dim] and an end before the start gives size 0. A
// dim unknown at build time, or sliced by bounds only known at run time,
// stays unknown.
inline SliceBox MakeSliceBox(const Shape& in, const OpDesc& op, const SliceBounds& bounds, const std::string& where) {
  const auto& axes = op.Attr<std::vector<int>>("axes");
  const auto& decrease = op.Attr<std::vector<int>>("decrease_axis");
  for (const auto* v : {&bounds.starts, &bounds.ends})
    NABLA_ENFORCE_VALUE(v->size < 0 || v->size == static_cast<int64_t>(axes.size()), *v, where,
                        ": starts and ends must have one entry per axis (", axes.size(), "), but received ", v->source,
                        " ", v->Known() ? ValuesToString(**v) : StrCat(v->size, " entries"));
  const bool known = bounds.starts.Known() && bounds.ends.Known();
  SliceBox b{std::vector<int64_t>(in.size(), 0), in, {}};
  std::vector<bool> sliced(in.size(), false);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int d = NormalizeAxis(axes[k], in.size(), "axes", where);
    NABLA_ENFORCE(!sliced[d], kInvalidArgument, where, ": attribute axes names dim ", d,
                  " twice: ", AttrToString(Attribute(axes)));
    sliced[d] = true;
    const int64_t dim = in[d];
    if (!known) b.box[d] = -1;
    if (dim < 0 || !known) continue;  // build time: the size is unknown until run time
    auto clamp = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
    const int64_t s = clamp((*bounds.starts)[k]), e = clamp((*bounds.ends)[k]);
    b.begin[d] = s;
    b.box[d] = std::max<int64_t>(e - s, 0);
  }
  std::vector<bool> drop(in.size(), false);
  for (int a : decrease) {
    const int d = NormalizeAxis(a, in.size(), "decrease_axis", where);
    NABLA_ENFORCE(sliced[d], kInvalidArgument, where, ": attribute decrease_axis entry ", a, " must be one of axes ",
                  AttrToString(Attribute(axes)), ", but received ", a);
    NABLA_ENFORCE(b.box[d] == 1 || b.box[d] < 0, kInvalidArgument, where, ": decrease_axis removes dim ", d,
                  ", which must have size 1 after slicing Input of shape ", ShapeToString(in), ", but received size ",
                  b.box[d]);
    drop[d] = true;
  }
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i]) b.out.push_back(b.box[i]);
  if (b.out.empty()) b.out.push_back(1);  // nabla never makes rank-0 tensors
  return b;
}

}  // namespace nabla::math_ops
