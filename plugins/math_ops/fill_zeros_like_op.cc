// fill_zeros_like: zeros of X's shape and dtype (the backward builder's zero
// gradient for an input whose gradient no op produces).
#include "math_util.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

namespace nabla::math_ops {
namespace {

template <typename T>
struct FillZerosLikeKernel {
  void operator()(const ExecutionContext& ctx) const {
    // Only X's shape is needed, and its buffer may already be released.
    const Tensor& x = ctx.InputVar("X")->GetTensor();
    T* o = AllocOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
    std::fill(o, o + x.Numel(), T(0));
  }
};

NABLA_REGISTER_OPS(fill_zeros_like) {
  registrar.Op("fill_zeros_like", __FILE__, __LINE__)
      .Doc("Out = zeros of the shape and dtype of X.")
      .Input("X", "(Tensor) gives the shape and dtype; its values are not read", kNoBuffer)
      .Output("Out", "(Tensor) the zeros")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .KernelDType([](const ExecutionContext& ctx) { return ctx.InputVar("X")->GetTensor().GetDType(); })
      .GradMaker<EmptyGradOpDescMaker>();
  RegisterCpuKernels<FillZerosLikeKernel, float, double, int32_t, int64_t, bool>(registrar, "fill_zeros_like", __FILE__,
                                                                                 __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
