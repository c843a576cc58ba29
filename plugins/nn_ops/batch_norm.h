#pragma once
// batch_norm's schema, shape inference, grad maker and kernels, which
// fused_batch_norm_act (batch_norm then relu, one op) shares. The kernels
// take the activation as kRelu: the forward applies it in the pass that
// writes Y, the gradient masks Y@GRAD by Y > 0 as it reads it, so the fused
// op computes bit for bit what batch_norm and relu compute.
#include <memory>
#include <string>
#include <vector>

#include "nabla/plugin.h"

namespace nabla::nn {

template <typename T, bool kRelu>
void BatchNormKernel(const ExecutionContext& ctx);
template <typename T, bool kRelu>
void BatchNormGradKernel(const ExecutionContext& ctx);

void InferBatchNorm(InferShapeContext& c);

// <type>_grad from X, Scale, Bias, SavedMean, SavedVariance and Y@GRAD (and
// Y, for the activation's mask, unless the type is batch_norm).
class BatchNormGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override;
};

// batch_norm's slots, attributes, shape inference, precision and grad maker
// registered for `type`; `y_doc` says what Y holds.
OpBuilder& BatchNormSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                           const std::string& y_doc, const char* file, int line);
// The schema of `type`_grad.
void BatchNormGradSchema(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                         int line);

// A grad-check case: X [N, C, ...] drawn from [-2, 2), Scale from [0.5, 1.5).
GradCheckSpec BnCase(std::string name, Shape x, AttributeMap attrs);

}  // namespace nabla::nn
