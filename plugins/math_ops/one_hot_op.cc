// one_hot: integer class ids X [..., 1] to rows of `depth` zeros with a one
// at each id, Out [..., depth]. No gradient.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Input depth_tensor where given, else attribute depth; >= 1. Build time
// with the input: unknown (nullopt).
template <typename Ctx>
std::optional<int64_t> Depth(const Ctx& c, const std::string& where) {
  const auto depth = IntAttrOrTensor(c, "depth_tensor", "depth");
  NABLA_ENFORCE_VALUE(!depth.Known() || *depth >= 1, depth, where, ": ", depth.source,
                      " must be >= 1 (the number of classes), but received ", *depth);
  return depth.value;
}

void InferOneHotShape(InferShapeContext& c) {
  Shape x = c.InputShape("X");
  const DType d = c.InputDType("X");
  NABLA_ENFORCE(d == DType::kInt64 || d == DType::kInt32, kInvalidArgument, c.Where(),
                ": X must be int64 (or int32), but received ", DTypeName(d));
  NABLA_ENFORCE(!x.empty() && (x.back() == 1 || x.back() < 0), kInvalidArgument, c.Where(),
                ": X must have a last dim of 1 ([..., 1]), but received shape ", ShapeToString(x));
  x.back() = Depth(c, c.Where()).value_or(-1);
  c.SetOutputShape("Out", x);
  c.SetOutputDType("Out", ParseDTypeAttr(c.Attr<std::string>("dtype"), "dtype", c.Where()));
}

template <typename I, typename T>
void OneHot(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t depth = *Depth(ctx, "op 'one_hot'");
  const bool allow = ctx.Attr<bool>("allow_out_of_range");
  Shape shape = x.GetShape();
  shape.back() = depth;
  const I* ids = x.Data<I>();
  T* out = AllocOutput<T>(ctx, ctx.Output("Out"), shape);
  std::fill(out, out + x.Numel() * depth, T(0));
  for (int64_t i = 0, n = x.Numel(); i < n; ++i) {
    const int64_t id = ids[i];
    if (id >= 0 && id < depth) {
      out[i * depth + id] = T(1);
      continue;
    }
    NABLA_ENFORCE(allow, kOutOfRange, "op 'one_hot': X[", i, "] = ", id, " is out of range [0, ", depth,
                  ") (depth); set allow_out_of_range to give such rows all zeros");
  }
}

template <typename I>
void OneHotKernel(const ExecutionContext& ctx) {
  switch (ParseDTypeAttr(ctx.Attr<std::string>("dtype"), "dtype", "op 'one_hot'")) {
    case DType::kFloat32:
      return OneHot<I, float>(ctx);
    case DType::kFloat64:
      return OneHot<I, double>(ctx);
    case DType::kInt32:
      return OneHot<I, int32_t>(ctx);
    case DType::kInt64:
      return OneHot<I, int64_t>(ctx);
    case DType::kBool:
      return OneHot<I, bool>(ctx);
    case DType::kBFloat16:
      NABLA_THROW(kInvalidArgument, "op 'one_hot': dtype bfloat16 is not supported; use float32");
  }
}

NABLA_REGISTER_OPS(one_hot) {
  registrar.Op("one_hot", __FILE__, __LINE__)
      .Doc(
          "Out[..., j] = 1 where j == X[..., 0], else 0: class ids X of shape [..., 1] become rows of length "
          "`depth`. An id outside [0, depth) is an error unless allow_out_of_range, which gives a row of zeros. "
          "Has no gradient.")
      .Input("X", "(Tensor, int64 or int32) class ids, shape [..., 1]")
      .Input("depth_tensor", "(Tensor<int32|int64>, optional) one element: depth at run time; before attribute depth",
             kTensorAttrInput)
      .Output("Out", "(Tensor) the one-hot rows, shape [..., depth], of dtype `dtype`")
      .RequiredAttr<int>("depth", "(int, required) the number of classes, >= 1",
                         [](const int& d) {
                           NABLA_ENFORCE(d >= 1, kInvalidArgument, "attribute depth must be >= 1, but received ", d);
                         })
      .Attr<std::string>("dtype", "float32", "(string, default \"float32\") Out's dtype", CheckDTypeName)
      .Attr<bool>("allow_out_of_range", false,
                  "(bool, default false) give ids outside [0, depth) a row of zeros instead of an error")
      .InferShape(InferOneHotShape)
      .GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel("one_hot", DeviceType::kCPU, DType::kInt64, OneHotKernel<int64_t>, __FILE__, __LINE__);
  registrar.Kernel("one_hot", DeviceType::kCPU, DType::kInt32, OneHotKernel<int32_t>, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
