// The backward builder: seed 002's append_backward (_append_backward_ops_,
// _addup_repetitive_outputs_, _remove_no_grad_branch_, _append_backward_vars_)
// with today's Paddle refinements. It never names an op it does not own by
// convention (SPEC §1: fill_constant, fill_zeros_like, sum); everything else
// it learns from the registry (grad makers, the has_sub_block trait).
#include "nabla/backward.h"

#include "nabla/op_registry.h"

namespace nabla {

std::vector<std::unique_ptr<OpDesc>> MakeGradOps(const OpDesc& op, const std::unordered_set<std::string>& no_grad_set,
                                                 std::unordered_map<std::string, std::string>* grad_to_var,
                                                 const std::vector<BlockDesc*>& grad_blocks) {
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  const OpInfo& info = registry->Get(op.Type());
  NABLA_ENFORCE(info.HasGradient(), kNotFound, "op '", op.Type(),
                "' needs a gradient but has no GradOpDescMaker: expected its registration to call GradMaker<...>() "
                "(or GradMaker<EmptyGradOpDescMaker>() for an op without gradient), but received none; registered by ",
                info.origin.ToString());
  std::unordered_map<std::string, std::string> local_grad_to_var;
  std::vector<std::unique_ptr<OpDesc>> grad_ops =
      info.grad_maker(op, no_grad_set, grad_to_var ? grad_to_var : &local_grad_to_var, grad_blocks);
  const ProgramDesc* program = grad_blocks.empty() ? nullptr : grad_blocks.front()->Program();
  for (auto& g : grad_ops) {
    NABLA_ENFORCE(g != nullptr, kInvalidArgument, "the GradOpDescMaker of op '", op.Type(),
                  "' returned a null op; registered by ", info.origin.ToString());
    // Errors about a grad op point at the forward op the user wrote.
    if (g->Pos().line == 0) g->SetPos(op.Pos());
    FillDefaultAttrs(*g, *registry, program);
  }
  return grad_ops;
}

}  // namespace nabla
