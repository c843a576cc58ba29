// assign: Out = a copy of X.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// A deep copy: assign exists to give Out storage of its own.
void AssignKernel(const ExecutionContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X"), ctx.GetDevice()); }

// X@GRAD = assign(Out@GRAD).
class AssignGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    std::vector<std::string> dx = InputGrad("X");
    if (dx.empty() || dx[0] == kEmptyVarName) return ops;
    ops.push_back(MakeOp("assign", {{"X", OutputGrad("Out")}}, {{"Out", dx}}));
    return ops;
  }
};

NABLA_REGISTER_OPS(assign) {
  registrar.Op("assign", __FILE__, __LINE__)
      .Doc("Out = X, copied into Out's own storage.")
      .Input("X", "(Tensor) the input")
      .Output("Out", "(Tensor) the copy")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<AssignGradMaker>()
      .GradCheck(CheckCase("matrix", {CheckInput("X", {2, 3})}));
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool})
    registrar.Kernel("assign", DeviceType::kCPU, t, AssignKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
