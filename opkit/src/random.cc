#include "nabla/opkit/random.h"

#include "nabla/error.h"
#include "nabla/opkit/axis.h"

namespace nabla::opkit {

Fans ComputeFans(const Shape& shape) {
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

namespace {

// The fan an initializer scales by, checked to be positive.
double InitializerFan(const ExecutionContext& ctx, double fan) {
  NABLA_ENFORCE(fan > 0, kInvalidArgument, "op '", ctx.Op().Type(), "': the fan computed from shape ",
                ShapeToString(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape"))), " must be positive, but received ",
                fan);
  return fan;
}

}  // namespace

double KaimingStd(const ExecutionContext& ctx) {
  Fans f = ComputeFans(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape")));
  const std::string& mode = ctx.Attr<std::string>("mode");
  double a = ctx.Attr<float>("negative_slope");
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  return gain / std::sqrt(InitializerFan(ctx, mode == "fan_out" ? f.out : f.in));
}

OpBuilder& KaimingAttrs(OpBuilder& b) {
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

double XavierStd(const ExecutionContext& ctx) {
  Fans f = ComputeFans(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape")));
  return ctx.Attr<float>("gain") * std::sqrt(2.0 / InitializerFan(ctx, f.in + f.out));
}

}  // namespace nabla::opkit
