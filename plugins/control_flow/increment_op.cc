// increment: Out = X + step for a one-element tensor of any numeric dtype
// (loop counters, in place or not). Its gradient is the identity.
#include "control_flow_util.h"
#include "nabla/plugin.h"

namespace nabla::control_flow {
namespace {

template <typename T>
void IncrementKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  NABLA_ENFORCE(x.Numel() == 1, kInvalidArgument, "op 'increment': X must hold exactly one element, but received ",
                x.DebugString());
  // Read before writing: Out may be X itself.
  T value = *x.Data<T>() + static_cast<T>(ctx.Attr<float>("step"));
  Shape shape = x.GetShape();
  *ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), shape) = value;
}

void IncrementGradKernel(const ExecutionContext& ctx) {
  ctx.Output("X@GRAD")->CopyFrom(ctx.Input("Out@GRAD"), ctx.GetDevice());
}

// X@GRAD = Out@GRAD (an identity the grad op copies, or nothing in place).
std::unique_ptr<OpDesc> IncrementGradOp(const GradContext& g, const std::vector<std::string>& dx) {
  return MakeOp("increment_grad", {{"Out@GRAD", g.OutputGrad("Out")}}, {{"X@GRAD", dx}});
}

NABLA_REGISTER_OPS(increment) {
  GradCheckSpec check;
  check.name = "scalar";
  GradCheckInput x;
  x.slot = "X";
  x.shape = {1};
  check.inputs.push_back(x);
  check.outputs.push_back({"Out", 1});
  check.attrs["step"] = 2.5f;
  registrar.Op("increment", __FILE__, __LINE__)
      .Doc("Out = X + step, for a one-element tensor of any numeric dtype (Out may be X: in place).")
      .Input("X", "(Tensor, one element) the counter")
      .Output("Out", "(Tensor) X + step, X's shape and dtype")
      .Attr<float>("step", 1.0f, "(float, default 1.0) the amount added, cast to X's dtype")
      .InferShape([](InferShapeContext& c) {
        Shape s = c.InputShape("X");
        NABLA_ENFORCE(NumElements(s) < 0 || NumElements(s) == 1, kInvalidArgument, c.Where(),
                      ": X must hold exactly one element, but received shape ", ShapeToString(s));
        NABLA_ENFORCE(c.InputDType("X") != DType::kBool, kInvalidArgument, c.Where(),
                      ": X must be numeric, but received bool");
        c.ShareShapeAndDType("X", "Out");
      })
      .GradMaker(OneGradOpIfWanted("X", IncrementGradOp))
      .GradCheck(check);
  registrar.Kernel("increment", DeviceType::kCPU, DType::kFloat32, IncrementKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("increment", DeviceType::kCPU, DType::kFloat64, IncrementKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("increment", DeviceType::kCPU, DType::kInt32, IncrementKernel<int32_t>, __FILE__, __LINE__);
  registrar.Kernel("increment", DeviceType::kCPU, DType::kInt64, IncrementKernel<int64_t>, __FILE__, __LINE__);

  registrar.Op("increment_grad", __FILE__, __LINE__)
      .Doc("Gradient of increment: X@GRAD = Out@GRAD.")
      .Input("Out@GRAD", "(Tensor) gradient of Out")
      .Output("X@GRAD", "(Tensor) gradient of X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("Out@GRAD", "X@GRAD"); })
      .GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel("increment_grad", DeviceType::kCPU, DType::kFloat32, IncrementGradKernel, __FILE__, __LINE__);
  registrar.Kernel("increment_grad", DeviceType::kCPU, DType::kFloat64, IncrementGradKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
