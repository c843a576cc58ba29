// assign: Out = a copy of X.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// A deep copy: assign exists to give Out storage of its own.
void AssignKernel(const ExecutionContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X"), ctx.GetDevice()); }

// X@GRAD = assign(Out@GRAD).
std::unique_ptr<OpDesc> AssignGradOp(const GradContext& g, const std::vector<std::string>& dx) {
  return MakeOp("assign", {{"X", g.OutputGrad("Out")}}, {{"Out", dx}});
}

NABLA_REGISTER_OPS(assign) {
  registrar.Op("assign", __FILE__, __LINE__)
      .Doc("Out = X, copied into Out's own storage.")
      .Input("X", "(Tensor) the input")
      .Output("Out", "(Tensor) the copy")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker(OneGradOpIfWanted("X", AssignGradOp))
      .GradCheck(CheckCase("matrix", {CheckInput("X", {2, 3})}));
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool})
    registrar.Kernel("assign", DeviceType::kCPU, t, AssignKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
