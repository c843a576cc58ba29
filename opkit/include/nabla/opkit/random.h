#pragma once
// Random numbers that are the same on every platform, random-fill op
// registration, and the fan math of the xavier_* and kaiming_* initializers.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/attr_tensor.h"
#include "nabla/opkit/attrs.h"
#include "nabla/opkit/axis.h"
#include "nabla/opkit/kernels.h"
#include "nabla/tensor.h"

namespace nabla::opkit {

// Random numbers from std::mt19937_64 (whose sequence the standard fixes)
// converted by hand: std's distributions differ between standard libraries,
// and seeded runs must give the same tensors everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double Uniform01() { return static_cast<double>(gen_() >> 11) * (1.0 / 9007199254740992.0); }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform01(); }
  // Box-Muller; both values of a pair are used.
  double Normal(double mean, double std) {
    if (has_spare_) {
      has_spare_ = false;
      return mean + std * spare_;
    }
    double u1 = 1.0 - Uniform01();  // (0, 1]: log stays finite
    double u2 = Uniform01();
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return mean + std * r * std::cos(kTwoPi * u2);
  }

 private:
  static constexpr double kTwoPi = 6.283185307179586476925286766559;
  std::mt19937_64 gen_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Fills Out (shape from attribute `shape`, or ShapeTensor / ShapeTensorList
// where the op has them: CreatedShape) with draw(rng) per element.
template <typename T, typename Draw>
void FillRandom(const ExecutionContext& ctx, Draw&& draw) {
  Tensor* out = ctx.Output("Out");
  T* o = AllocOutput<T>(ctx, out, CreatedShape(ctx));
  Rng rng(ctx.Seed());
  for (int64_t i = 0, n = out->Numel(); i < n; ++i) o[i] = static_cast<T>(draw(rng));
}

// Registers an op `type` with no input that fills Out of attribute shape and
// dtype (float32, float64) with values make_draw(ctx) returns a drawer for
// (a callable taking Rng&). Attributes of the op's own go on the result.
template <typename MakeDraw>
OpBuilder& RegisterRandomOp(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                            int line, MakeDraw make_draw) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Doc(doc)
          .Output("Out", "(Tensor) the random tensor, of attribute shape and dtype")
          .Attr<std::vector<int>>("shape", {}, "(ints, default []) the shape of Out", CheckShapeAttr)
          .Attr<int>("seed", 0,
                     "(int, default 0) random seed; 0 derives one from the run's seed and this op, "
                     "so seeded runs are reproducible")
          .Attr<std::string>("dtype", "float32", "(string, default \"float32\") float32 or float64", CheckDTypeName)
          .InferShape(InferFromShapeAndDTypeAttrs)
          .KernelDType(KernelDTypeFromAttr)
          .template GradMaker<EmptyGradOpDescMaker>()
          .Random();
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel(
        type, DeviceType::kCPU, DTypeOf<T>::value,
        [make_draw](const ExecutionContext& ctx) { FillRandom<T>(ctx, make_draw(ctx)); }, file, line);
  });
  return b;
}

// fan_in and fan_out of a weight of shape `shape`, as the xavier_* and
// kaiming_* initializers use them. nabla stores a 2-D weight as [in, out]
// (mul computes X[N, in] * W[in, out]), so fan_in = shape[0] and
// fan_out = shape[1]; PyTorch stores [out, in] and reads them the other way
// round, giving the same numbers for the same layer. Rank > 2 is a conv
// filter [out_channels, in_channels, k...]: fan_in = shape[1] * prod(k),
// fan_out = shape[0] * prod(k). Rank 1: both are shape[0]; rank 0: both 1.
struct Fans {
  double in = 1.0, out = 1.0;
};
inline Fans ComputeFans(const Shape& shape) {
  Fans f;
  if (shape.size() == 1) {
    f.in = f.out = static_cast<double>(shape[0]);
  } else if (shape.size() == 2) {
    f.in = static_cast<double>(shape[0]);
    f.out = static_cast<double>(shape[1]);
  } else if (shape.size() > 2) {
    double receptive = static_cast<double>(ProductOf(shape, 2, shape.size()));
    f.in = static_cast<double>(shape[1]) * receptive;
    f.out = static_cast<double>(shape[0]) * receptive;
  }
  return f;
}

namespace random_detail {
// The fan an initializer scales by, checked to be positive.
inline double InitializerFan(const ExecutionContext& ctx, double fan) {
  NABLA_ENFORCE(fan > 0, kInvalidArgument, "op '", ctx.Op().Type(), "': the fan computed from shape ",
                ShapeToString(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape"))), " must be positive, but received ",
                fan);
  return fan;
}
}  // namespace random_detail

// kaiming_*: gain / sqrt(fan) with PyTorch's leaky_relu gain
// sqrt(2 / (1 + negative_slope^2)) and the fan attribute `mode` picks.
inline double KaimingStd(const ExecutionContext& ctx) {
  Fans f = ComputeFans(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape")));
  const std::string& mode = ctx.Attr<std::string>("mode");
  double a = ctx.Attr<float>("negative_slope");
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  return gain / std::sqrt(random_detail::InitializerFan(ctx, mode == "fan_out" ? f.out : f.in));
}

// Declares kaiming_*'s attributes `mode` and `negative_slope`.
inline OpBuilder& KaimingAttrs(OpBuilder& b) {
  return b
      .Attr<std::string>("mode", "fan_in",
                         "(string, default \"fan_in\") fan_in keeps the forward variance, fan_out the backward one",
                         [](const std::string& m) {
                           NABLA_ENFORCE(m == "fan_in" || m == "fan_out", kInvalidArgument,
                                         "attribute mode must be fan_in or fan_out, but received '", m, "'");
                         })
      .Attr<float>("negative_slope", 0.0f,
                   "(float, default 0.0) the negative slope of the leaky_relu that follows (0: relu)");
}

// xavier_*: gain * sqrt(2 / (fan_in + fan_out)).
inline double XavierStd(const ExecutionContext& ctx) {
  Fans f = ComputeFans(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape")));
  return ctx.Attr<float>("gain") * std::sqrt(2.0 / random_detail::InitializerFan(ctx, f.in + f.out));
}

}  // namespace nabla::opkit
