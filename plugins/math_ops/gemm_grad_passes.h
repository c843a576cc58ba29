#pragma once
// The rewrites mul and matmul bring for their grad ops once the backward
// part exists (OpBuilder::RewritesAfterBackward, run by FuseGradOps), and
// the optional input that lets their Y@GRAD accumulate in place. Private
// to math_ops: each op registers the passes for its own grad type.
#include <algorithm>
#include <string>

#include "math_util.h"
#include "nabla/mixed_precision.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {

// mul_grad's and matmul_grad's optional input: a partial Y@GRAD that the
// op's product adds to.
inline constexpr const char* kAccumulateY = "AccumulateY";
inline constexpr const char* kAccumulateYDoc =
    "(Tensor, optional) a partial gradient of Y: Y@GRAD is then AccumulateY plus this op's gradient of Y, "
    "written in place where both are one var (FuseGradOps chains a shared weight's grad ops through it instead "
    "of a sum); float32 and float64 on the cpu";

// mul_grad's optional input for X@GRAD, as AccumulateY for Y@GRAD.
inline constexpr const char* kAccumulateX = "AccumulateX";
inline constexpr const char* kAccumulateXDoc =
    "(Tensor, optional) a partial gradient of X: X@GRAD is then AccumulateX plus this op's gradient of X, "
    "written in place where both are one var (FuseGradOps chains the grad ops of the products reading one "
    "input through it instead of a sum); float32 and float64 on the cpu";

// mul_grad's and matmul_grad's second optional input: with AccumulateY, the
// op applies an sgd step, Y@GRAD = AccumulateY - LearningRate * (its
// gradient of Y). FuseGradOps's apply_sgd_in_weight_gradients names the
// parameter as AccumulateY and Y@GRAD and drops the sgd op: the weight is
// updated by the GEMM that computes its gradient, which is never stored.
inline constexpr const char* kSgdLearningRate = "LearningRate";
inline constexpr const char* kSgdLearningRateDoc =
    "(Tensor, optional, with AccumulateY) a one-element learning rate: Y@GRAD is then AccumulateY minus "
    "LearningRate times this op's gradient of Y, an sgd step in the GEMM (FuseGradOps writes a weight updated "
    "this way in place of its gradient and the sgd op); cpu only";

// The factor of the op's own gradient of Y: 1, or -LearningRate where the op
// applies sgd.
double YGradScale(const ExecutionContext& ctx);

// Y@GRAD's (or with kAccumulateX, X@GRAD's) data for a kernel that
// accumulates, holding AccumulateY (AccumulateX): the
// same tensor's buffer where both are one var (FuseGradOps's chain, which
// lets nothing else touch the gradient between its links), else `dy`
// allocated with `shape` and the partial sum copied in.
template <typename T>
T* StartAccumulation(const ExecutionContext& ctx, Tensor* dy, const Shape& shape, const char* slot = kAccumulateY) {
  const Tensor& acc = ctx.Input(slot);
  // No "op '...'" prefix: the dispatcher adds it after the program position.
  NABLA_ENFORCE(acc.GetShape() == shape, kInvalidArgument, slot, " has shape ", ShapeToString(acc.GetShape()),
                " but the gradient it adds to has ", ShapeToString(shape));
  if (&acc == dy) return dy->MutableData<T>();
  const T* partial = acc.Data<T>();
  T* d = dy->Allocate<T>(ctx.GetDevice(), shape);
  std::copy(partial, partial + acc.Numel(), d);
  return d;
}

// Throws for an op that names AccumulateY or AccumulateX, from a kernel
// that does not accumulate (opencl; bfloat16 without force_fp32_output):
// the partial sum is never dropped silently.
void RefuseAccumulate(const ExecutionContext& ctx, const char* kernel);

// Computes a weight that several `grad_type` ops read once transposed, so
// each X@GRAD is a plain product (gemm_grad_passes.cc says when).
ProgramPass ShareTransposedWeightsPass(const std::string& grad_type);
// Chains the partial gradients of a weight read by several `grad_type` ops
// through AccumulateY instead of summing them.
ProgramPass ChainWeightGradientsPass(const std::string& grad_type);
// The same for an input read by several mul ops, through mul_grad's
// AccumulateX.
ProgramPass ChainInputGradientsPass();
// Folds an sgd update of a weight into the `grad_type` op that computes its
// whole gradient (AccumulateY and LearningRate).
ProgramPass ApplySgdInWeightGradientsPass(const std::string& grad_type);

}  // namespace nabla::math_ops
