#pragma once
// The backward builder (seeds 000-003, with today's Paddle refinements).
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

using ParamGrads = std::vector<std::pair<std::string, std::string>>;

// Appends the backward part of `loss` (one element) to the block that holds
// it, recursing into sub-blocks first. Returns (parameter, gradient) pairs
// filtered and ordered by `parameter_list` (all trainable persistable vars
// when empty); a parameter that gets no gradient is left out. Records the
// result in program.Backward().
NABLA_API ParamGrads AppendBackward(ProgramDesc& program, const std::string& loss,
                                    const std::vector<std::string>& parameter_list = {},
                                    const std::unordered_set<std::string>& no_grad_set = {});

// Gradients of `targets` (seeded with `target_grads`, or ones when empty)
// with respect to `inputs`; returns the gradient var name per input ("" when
// the input gets none).
NABLA_API std::vector<std::string> CalcGradient(ProgramDesc& program, const std::vector<std::string>& targets,
                                                const std::vector<std::string>& inputs,
                                                const std::vector<std::string>& target_grads = {},
                                                const std::unordered_set<std::string>& no_grad_set = {});

// Seed 000's BuildGradOp: the grad ops the op's GradOpDescMaker emits, with
// default attributes filled in.
NABLA_API std::vector<std::unique_ptr<OpDesc>> MakeGradOps(
    const OpDesc& op, const std::unordered_set<std::string>& no_grad_set,
    std::unordered_map<std::string, std::string>* grad_to_var = nullptr,
    const std::vector<BlockDesc*>& grad_blocks = {});

}  // namespace nabla
