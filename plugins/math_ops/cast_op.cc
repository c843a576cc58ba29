// cast: converts X to another dtype.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

void InferCastShape(InferShapeContext& c) {
  DType in = ParseDTypeAttr(c.Attr<std::string>("in_dtype"), "in_dtype", c.Where());
  DType out = ParseDTypeAttr(c.Attr<std::string>("out_dtype"), "out_dtype", c.Where());
  // At build time X's dtype may not be inferred yet; at run time it is real.
  if (c.IsRuntime())
    NABLA_ENFORCE(c.InputDType("X") == in, kInvalidArgument, c.Where(), ": attribute in_dtype says ", DTypeName(in),
                  " but X holds ", DTypeName(c.InputDType("X")));
  c.SetOutputShape("Out", c.InputShape("X"));
  c.SetOutputDType("Out", out);
}

template <typename From, typename To>
void Convert(const From* x, To* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<To, bool>)
      o[i] = x[i] != From(0);
    else
      o[i] = static_cast<To>(x[i]);
  }
}

// bfloat16 goes through float32; float32 <-> bfloat16 (what mixed precision
// casts) takes the backend's vectorized conversions, split over the arena.
template <typename To>
void Convert(const bfloat16* x, To* o, int64_t n) {
  cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<To, float>) {
      cpu::ConvertFromBf16(x + b, o + b, e - b);
    } else {
      float f[256];
      for (int64_t i = b; i < e; i += 256) {
        const int64_t m = std::min<int64_t>(256, e - i);
        cpu::ConvertFromBf16(x + i, f, m);
        Convert(f, o + i, m);
      }
    }
  });
}

template <typename From>
void Convert(const From* x, bfloat16* o, int64_t n) {
  cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<From, float>) {
      cpu::ConvertToBf16(x + b, o + b, e - b);
    } else {
      for (int64_t i = b; i < e; ++i) o[i] = FloatToBf16(static_cast<float>(x[i]));
    }
  });
}

void Convert(const bfloat16* x, bfloat16* o, int64_t n) { std::copy(x, x + n, o); }

// Registered per input dtype; the output dtype is a run-time choice.
template <typename From>
struct CastKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    Tensor* out = ctx.Output("Out");
    DType to = ParseDTypeAttr(ctx.Attr<std::string>("out_dtype"), "out_dtype", "op 'cast'");
    const From* xd = x.Data<From>();
    int64_t n = x.Numel();
    switch (to) {
      case DType::kFloat32:
        Convert(xd, AllocOutput<float>(ctx, out, x.GetShape()), n);
        break;
      case DType::kFloat64:
        Convert(xd, AllocOutput<double>(ctx, out, x.GetShape()), n);
        break;
      case DType::kInt32:
        Convert(xd, AllocOutput<int32_t>(ctx, out, x.GetShape()), n);
        break;
      case DType::kInt64:
        Convert(xd, AllocOutput<int64_t>(ctx, out, x.GetShape()), n);
        break;
      case DType::kBool:
        Convert(xd, AllocOutput<bool>(ctx, out, x.GetShape()), n);
        break;
      case DType::kBFloat16:
        Convert(xd, AllocOutput<bfloat16>(ctx, out, x.GetShape()), n);
        break;
    }
  }
};

// X@GRAD = cast(Out@GRAD) back to in_dtype.
std::unique_ptr<OpDesc> CastGradOp(const GradContext& g, const std::vector<std::string>& dx) {
  return MakeOp("cast", {{"X", g.OutputGrad("Out")}}, {{"Out", dx}},
                {{"in_dtype", g.Attr<std::string>("out_dtype")}, {"out_dtype", g.Attr<std::string>("in_dtype")}});
}

NABLA_REGISTER_OPS(cast) {
  GradCheckSpec to_f32 = CheckCase("float64_to_float32", {CheckInput("X", {2, 3})},
                                   {{"in_dtype", std::string("float64")}, {"out_dtype", std::string("float32")}});
  // The op is linear, so a large step costs no truncation error and keeps
  // float32 rounding of Out small next to it.
  to_f32.delta = 1e-2;
  registrar.Op("cast", __FILE__, __LINE__)
      .DTypeCast()
      .Doc("Out = X converted to out_dtype (to bool: X != 0; float to int rounds toward zero).")
      .Input("X", "(Tensor) the input, of dtype in_dtype")
      .Output("Out", "(Tensor) the converted tensor, of X's shape")
      .RequiredAttr<std::string>(
          "in_dtype", "(string, required) X's dtype: float32, float64, int32, int64, bool, bfloat16", CheckDTypeName)
      .RequiredAttr<std::string>(
          "out_dtype", "(string, required) Out's dtype: float32, float64, int32, int64, bool, bfloat16", CheckDTypeName)
      .InferShape(InferCastShape)
      .GradMaker(OneGradOpIfWanted("X", CastGradOp))
      .GradCheck(to_f32)
      .GradCheck(CheckCase("float64_to_float64", {CheckInput("X", {3})},
                           {{"in_dtype", std::string("float64")}, {"out_dtype", std::string("float64")}}));
  RegisterCpuKernels<CastKernel, float, double, int32_t, int64_t, bool, bfloat16>(registrar, "cast", __FILE__,
                                                                                  __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
