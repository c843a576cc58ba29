#pragma once
// What arg_max and arg_min share: Paddle's schema (X -> int64 Out; axis,
// keepdims, flatten), the output shape and the search, which gives the first
// index on ties and lets NaN win (PyTorch's argmax/argmin).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {

inline Shape ArgExtremumShape(const Shape& x, const OpDesc& op, const std::string& where) {
  const bool keep = op.Attr<bool>("keepdims");
  if (op.Attr<bool>("flatten")) return keep ? Shape(x.size(), 1) : Shape{1};
  const int axis = NormalizeAxis(op.Attr<int>("axis"), x.size(), "axis", where);
  Shape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (static_cast<int>(i) != axis)
      out.push_back(x[i]);
    else if (keep)
      out.push_back(1);
  }
  if (out.empty()) out.push_back(1);  // nabla never makes rank-0 tensors
  return out;
}

// arg_max (kMax) or arg_min.
template <typename T, bool kMax>
struct ArgExtremumKernel {
  void operator()(const ExecutionContext& ctx) const {
    const std::string where = StrCat("op '", ctx.Op().Type(), "'");
    const Tensor& x = ctx.Input("X");
    const Shape& s = x.GetShape();
    Shape out_shape = ArgExtremumShape(s, ctx.Op(), where);
    int64_t outer = 1, dim = x.Numel(), inner = 1;
    if (!ctx.Attr<bool>("flatten")) {
      const int axis = NormalizeAxis(ctx.Attr<int>("axis"), s.size(), "axis", where);
      outer = ProductOf(s, 0, axis);
      dim = s[axis];
      inner = ProductOf(s, axis + 1, s.size());
    }
    NABLA_ENFORCE(dim > 0, kInvalidArgument, where, ": the reduced dim of X (shape ", ShapeToString(s),
                  ") must not be empty");
    const T* src = x.Data<T>();
    int64_t* dst = AllocOutput<int64_t>(ctx, ctx.Output("Out"), out_shape);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* p = src + o * dim * inner + i;
        int64_t best = 0;
        for (int64_t d = 1; d < dim; ++d) {
          const T v = p[d * inner], b = p[best * inner];
          const bool better = kMax ? v > b : v < b;
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(b)) break;
            if (std::isnan(v) || better) best = d;
          } else {
            if (better) best = d;
          }
        }
        dst[o * inner + i] = best;
      }
  }
};

inline OpBuilder& ArgExtremumSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                                    const char* file, int line) {
  return registrar.Op(type, file, line)
      .Doc(doc)
      .Input("X", "(Tensor) the input")
      .Output("Out", "(Tensor, int64) the indices")
      .Attr<int>("axis", 0, "(int, default 0) the dim to search along; negative counts from the end")
      .Attr<bool>("keepdims", false, "(bool, default false) keep the searched dim as size 1")
      .Attr<bool>("flatten", false, "(bool, default false) search all of X; Out is then [1] (or all 1s with keepdims)")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", ArgExtremumShape(c.InputShape("X"), c.Op(), c.Where()));
        c.SetOutputDType("Out", DType::kInt64);
      })
      .GradMaker<EmptyGradOpDescMaker>();
}

}  // namespace nabla::math_ops
