// minus: Out = X - Y for tensors of one shape. Seed 003's example of a
// gradient written with existing ops: no minus_grad kernel exists.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

void InferMinusShape(InferShapeContext& c) {
  Shape x = c.InputShape("X"), y = c.InputShape("Y");
  bool same = x.size() == y.size();
  for (size_t i = 0; same && i < x.size(); ++i) same = x[i] < 0 || y[i] < 0 || x[i] == y[i];
  NABLA_ENFORCE(same, kInvalidArgument, c.Where(), ": expected Y of the shape of X, ", ShapeToString(x),
                ", but received ", ShapeToString(y), " (elementwise_sub broadcasts)");
  c.ShareShapeAndDType("X", "Out");
}

template <typename T>
struct MinusKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    NABLA_ENFORCE(x.GetShape() == y.GetShape(), kInvalidArgument, "op 'minus': expected Y of the shape of X, ",
                  ShapeToString(x.GetShape()), ", but received ", ShapeToString(y.GetShape()));
    const T* xd = x.Data<T>();
    const T* yd = y.Data<T>();
    T* o = AllocOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
    for (int64_t i = 0, n = x.Numel(); i < n; ++i) o[i] = xd[i] - yd[i];
  }
};

// X@GRAD = scale(Out@GRAD, 1) and Y@GRAD = scale(Out@GRAD, -1); a side that
// needs no gradient gets no op.
class MinusGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    auto add = [&](const std::string& slot, float factor) {
      std::vector<std::string> g = InputGrad(slot);
      if (g.empty() || g[0] == kEmptyVarName) return;
      ops.push_back(MakeOp("scale", {{"X", OutputGrad("Out")}}, {{"Out", g}},
                           {{"scale", factor}, {"bias", 0.0f}, {"bias_after_scale", true}}));
    };
    add("X", 1.0f);
    add("Y", -1.0f);
    return ops;
  }
};

NABLA_REGISTER_OPS(minus) {
  registrar.Op("minus", __FILE__, __LINE__)
      .Doc("Out = X - Y for X and Y of the same shape.")
      .Input("X", "(Tensor) the minuend")
      .Input("Y", "(Tensor) the subtrahend, of the shape of X")
      .Output("Out", "(Tensor) the difference")
      .InferShape(InferMinusShape)
      .GradMaker<MinusGradMaker>()
      .GradCheck(CheckCase("both", {CheckInput("X", {2, 3}), CheckInput("Y", {2, 3})}))
      .GradCheck(CheckCase("only_y", {NoCheck(CheckInput("X", {3})), CheckInput("Y", {3})}));
  RegisterCpuKernels<MinusKernel, float, double>(registrar, "minus", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
