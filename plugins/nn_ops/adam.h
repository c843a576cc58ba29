#pragma once
// adam's step and schema, which adamw (decoupled weight decay, then the same
// step) shares.
#include <string>

#include "nabla/plugin.h"

namespace nabla::nn {

// One adam step on the op's slots (adam_op.cc's formula) with LearningRate
// times lr_ratio, after Param *= 1 - lr * lr_ratio * decay (decay 0: none).
template <typename T>
void AdamStep(const ExecutionContext& ctx, double lr_ratio, double decay);

// adam's slots, attributes beta1, beta2, epsilon, shape inference and traits
// for op `type`; the caller adds Doc, its own attributes and kernels.
OpBuilder& AdamSchema(Registrar& registrar, const std::string& type, const char* file, int line);

}  // namespace nabla::nn
