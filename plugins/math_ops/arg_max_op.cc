// arg_max: the int64 position of the largest element along `axis` (the
// first one on ties; NaN counts as the largest, as in PyTorch). No gradient.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

Shape ArgMaxShape(const Shape& x, const OpDesc& op, const std::string& where) {
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

template <typename T>
struct ArgMaxKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Shape& s = x.GetShape();
    Shape out_shape = ArgMaxShape(s, ctx.Op(), "op 'arg_max'");
    int64_t outer = 1, dim = x.Numel(), inner = 1;
    if (!ctx.Attr<bool>("flatten")) {
      const int axis = NormalizeAxis(ctx.Attr<int>("axis"), s.size(), "axis", "op 'arg_max'");
      outer = ProductOf(s, 0, axis);
      dim = s[axis];
      inner = ProductOf(s, axis + 1, s.size());
    }
    NABLA_ENFORCE(dim > 0, kInvalidArgument, "op 'arg_max': the reduced dim of X (shape ", ShapeToString(s),
                  ") must not be empty");
    const T* src = x.Data<T>();
    int64_t* dst = AllocOutput<int64_t>(ctx, ctx.Output("Out"), out_shape);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* p = src + o * dim * inner + i;
        int64_t best = 0;
        for (int64_t d = 1; d < dim; ++d) {
          const T v = p[d * inner], b = p[best * inner];
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(b)) break;
            if (std::isnan(v) || v > b) best = d;
          } else {
            if (v > b) best = d;
          }
        }
        dst[o * inner + i] = best;
      }
  }
};

NABLA_REGISTER_OPS(arg_max) {
  registrar.Op("arg_max", __FILE__, __LINE__)
      .Doc(
          "Out = the index (int64) of the largest element of X along `axis` (over all of X when `flatten`); ties "
          "give the first index and NaN counts as the largest. Has no gradient.")
      .Input("X", "(Tensor) the input")
      .Output("Out", "(Tensor, int64) the indices")
      .Attr<int>("axis", 0, "(int, default 0) the dim to search along; negative counts from the end")
      .Attr<bool>("keepdims", false, "(bool, default false) keep the searched dim as size 1")
      .Attr<bool>("flatten", false, "(bool, default false) search all of X; Out is then [1] (or all 1s with keepdims)")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", ArgMaxShape(c.InputShape("X"), c.Op(), c.Where()));
        c.SetOutputDType("Out", DType::kInt64);
      })
      .GradMaker<EmptyGradOpDescMaker>();
  RegisterCpuKernels<ArgMaxKernel, float, double, int32_t, int64_t>(registrar, "arg_max", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
