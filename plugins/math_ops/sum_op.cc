// sum: adds any number of tensors of one shape (the op the backward builder
// uses to accumulate x@GRAD@RENAME@i into x@GRAD).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

void InferSumShape(InferShapeContext& c) {
  size_t n = c.InputSize("X");
  NABLA_ENFORCE(n > 0, kInvalidArgument, c.Where(), ": expected at least one input in X, but received none");
  Shape shape = c.InputShape("X", 0);
  DType dtype = c.InputDType("X", 0);
  for (size_t i = 1; i < n; ++i) {
    Shape s = c.InputShape("X", i);
    bool same = s.size() == shape.size();
    for (size_t d = 0; same && d < s.size(); ++d) {
      if (shape[d] < 0) shape[d] = s[d];
      same = s[d] < 0 || s[d] == shape[d];
    }
    NABLA_ENFORCE(same, kInvalidArgument, c.Where(), ": every input of X must have the shape of X[0], ",
                  ShapeToString(c.InputShape("X", 0)), ", but X[", i, "] has shape ", ShapeToString(s));
    NABLA_ENFORCE(c.InputDType("X", i) == dtype, kInvalidArgument, c.Where(),
                  ": every input of X must have the dtype of X[0], ", DTypeName(dtype), ", but X[", i, "] is ",
                  DTypeName(c.InputDType("X", i)));
  }
  c.SetOutputShape("Out", shape);
  c.SetOutputDType("Out", dtype);
}

template <typename T>
struct SumKernel {
  void operator()(const ExecutionContext& ctx) const {
    std::vector<const Tensor*> xs = ctx.MultiInput("X");
    Tensor* out = ctx.Output("Out");
    const Shape& shape = xs.at(0)->GetShape();
    int64_t n = xs[0]->Numel();
    // Out may be one of the inputs (in-place accumulation): sum into a
    // scratch buffer before Out's buffer is touched.
    bool aliased = std::find(xs.begin(), xs.end(), out) != xs.end();
    std::vector<T> scratch(aliased ? static_cast<size_t>(n) : 0);
    T* acc = aliased ? scratch.data() : AllocOutput<T>(ctx, out, shape);
    std::vector<const T*> data;
    for (const Tensor* x : xs) data.push_back(x->Data<T>());
    // Each element adds the inputs in their order, whatever the split.
    cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        std::vector<const float*> from(data.size());
        for (size_t j = 0; j < data.size(); ++j) from[j] = data[j] + b;
        cpu::SumArrays(from.data(), static_cast<int64_t>(from.size()), acc + b, e - b);
      } else {
        for (int64_t i = b; i < e; ++i) {
          T s = data[0][i];
          for (size_t j = 1; j < data.size(); ++j) s += data[j][i];
          acc[i] = s;
        }
      }
    });
    if (aliased) std::copy(scratch.begin(), scratch.end(), AllocOutput<T>(ctx, out, shape));
  }
};

// X[i]@GRAD = Out@GRAD: one scale op (scale 1) per input that wants a
// gradient, as Paddle does.
class SumGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    for (const std::string& dx : InputGrad("X")) {
      if (dx == kEmptyVarName) continue;
      ops.push_back(MakeOp("scale", {{"X", OutputGrad("Out")}}, {{"Out", {dx}}},
                           {{"scale", 1.0f}, {"bias", 0.0f}, {"bias_after_scale", true}}));
    }
    return ops;
  }
};

NABLA_REGISTER_OPS(sum) {
  registrar.Op("sum", __FILE__, __LINE__)
      .Doc("Out = X[0] + X[1] + ... ; every input has the same shape and dtype.")
      .Input("X", "(Tensor list) the tensors to add, all of one shape", kDuplicable)
      .Output("Out", "(Tensor) their sum")
      .InferShape(InferSumShape)
      .GradMaker<SumGradMaker>()
      .GradCheck([] {
        GradCheckInput x = CheckInput("X", {2, 3});
        x.count = 3;
        return CheckCase("three", {x});
      }());
  RegisterCpuKernels<SumKernel, float, double, int32_t, int64_t>(registrar, "sum", __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
