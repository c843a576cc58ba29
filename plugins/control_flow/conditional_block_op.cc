// conditional_block: runs its sub_block once, in a child scope recorded in
// Scope, when the condition holds; conditional_block_grad runs the grad block
// in that scope, or passes zeros (and carried gradients unchanged) when the
// branch was not taken.
#include "nabla/plugin.h"
#include "sub_block_util.h"

namespace nabla::control_flow {
namespace {

bool BranchTaken(const ExecutionContext& ctx) {
  const OpDesc& op = ctx.Op();
  if (op.Attr<bool>("is_scalar_condition")) {
    NABLA_ENFORCE(op.Input("Cond").size() == 1, kInvalidArgument,
                  "op 'conditional_block' with is_scalar_condition = true: expected exactly one Cond var, but "
                  "received ",
                  op.Input("Cond").size());
    return ReadScalarBool(ctx.Input("Cond"), StrCat("op 'conditional_block': Cond '", op.Input("Cond")[0], "'"));
  }
  // Paddle's rule without a scalar condition: run when every Cond tensor
  // holds at least one element.
  for (const Tensor* t : ctx.MultiInput("Cond"))
    if (t == nullptr || t->Numel() == 0) return false;
  return true;
}

void DropScopes(Scope& scope, Variable* var) {
  for (Scope* s : var->GetStepScopes()) scope.DeleteScope(s);
  var->GetStepScopes().clear();
}

void ConditionalBlockKernel(const ExecutionContext& ctx) {
  const OpDesc& op = ctx.Op();
  Scope& scope = ctx.GetScope();
  Variable* scopes = ctx.OutputVar("Scope");
  if (scopes != nullptr) {
    DropScopes(scope, scopes);
    scopes->SetType(VarType::kStepScopes);
  }
  if (!BranchTaken(ctx)) return;
  const bool keep = scopes != nullptr;
  std::vector<std::string> carried =
      keep ? CarriedNames(op.Input("Input"), op.Output("Out")) : std::vector<std::string>{};
  Scope& step = RunForwardStep(ctx, op.Attr<BlockRef>("sub_block").idx, scope, carried, keep);
  if (keep) {
    scopes->GetStepScopes().push_back(&step);
  } else {
    scope.DeleteScope(&step);
  }
}

void ConditionalBlockGradKernel(const ExecutionContext& ctx) {
  const OpDesc& op = ctx.Op();
  const RunContext* run = ctx.Run();
  NABLA_ENFORCE(run != nullptr && run->program != nullptr, kPreconditionNotMet,
                "op 'conditional_block_grad' runs a sub-block but was not started by an executor");
  GradBlockPlan plan = PlanGradBlock(*run->program, op.Attr<BlockRef>("sub_block").idx);
  Scope& scope = ctx.GetScope();
  Device& device = ctx.GetDevice();
  std::vector<InputGradSlot> slots = InputGradSlots(ctx, plan, "Input", StrCat("Input", kGradSuffix), "Out");
  std::vector<OutputGradSource> og = OutputGradSources(ctx, slots, "Out");
  // Not taken: Out kept the value it had, so a carried var's gradient passes
  // through unchanged (it is the same var) and every other one is zero.
  for (const auto& s : slots) {
    if (s.carried) continue;
    const Variable* fwd = scope.FindVar(s.fwd);
    NABLA_ENFORCE(fwd != nullptr && HasValue(*fwd), kPreconditionNotMet, "op 'conditional_block_grad': input '", s.fwd,
                  "' has no value, so its gradient '", s.grad, "' cannot be shaped");
    ZeroVarLike(*fwd, s.outer, device);
  }
  Variable* scopes = ctx.InputVar("Scope");
  if (scopes->GetStepScopes().empty()) {
    FinishOverwritten(og, false, scope, device);
    return;
  }
  Scope& step = *scopes->GetStepScopes().front();
  RunGradStep(ctx, plan, step, scope, og);
  CollectStepGrads(slots, step, device, "op 'conditional_block_grad'");
  DropScopes(scope, scopes);
  FinishOverwritten(og, true, scope, device);
}

class ConditionalBlockGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    NABLA_ENFORCE(!Output("Scope").empty() && Output("Scope")[0] != kEmptyVarName, kInvalidArgument,
                  "op 'conditional_block' is differentiated but has no Scope output: expected a var of type "
                  "step_scopes in slot Scope (it keeps the branch's values for the gradient), but received none");
    return MakeSubBlockGradOp(ForwardOp(), GradBlock(0), {"Cond", "Input"}, "Input", "Out", "Scope", InputGrad("Input"),
                              OutputGrad("Out"));
  }
};

NABLA_REGISTER_OPS(conditional_block) {
  registrar.Op("conditional_block", __FILE__, __LINE__)
      .Doc(
          "Runs sub_block once, in a new child scope recorded in Scope, when the condition holds: with "
          "is_scalar_condition, when Cond[0] (a one-element bool tensor) is true; otherwise when every Cond "
          "tensor has at least one element. Outer vars the block writes (Out) keep their value when it does not "
          "run.")
      .Input("Cond", "(Tensors) the condition", kDuplicable)
      .Input("Input", "(Tensors) every outer var the sub-block reads", kDuplicable | kDispensable)
      .Output("Out", "(Tensors) every outer var the sub-block writes", kDuplicable | kDispensable)
      .Output("Scope", "(step_scopes) the branch's scope, for the gradient", kDispensable)
      .RequiredAttr<BlockRef>("sub_block", "(block) the branch")
      .Attr<bool>("is_scalar_condition", false,
                  "(bool, default false) Cond is one bool element (else: run when every Cond is non-empty)")
      .InferVarType([](const OpDesc& op, BlockDesc& block) {
        for (const auto& name : op.Output("Scope"))
          if (name != kEmptyVarName) block.Var(name)->SetType(VarType::kStepScopes);
        int idx = op.Attr<BlockRef>("sub_block").idx;
        const ProgramDesc* program = block.Program();
        NABLA_ENFORCE(program != nullptr && idx > 0 && static_cast<size_t>(idx) < program->Size(), kInvalidArgument,
                      "op 'conditional_block': attribute sub_block must name a sub-block of the program (1..",
                      program ? program->Size() - 1 : 0, "), but received ", idx);
        CheckSubBlockSlots(op, *program->Block(static_cast<size_t>(idx)), {"Input", "Cond"}, "Out");
      })
      .InferShape([](InferShapeContext& c) {
        if (c.Attr<bool>("is_scalar_condition")) {
          NABLA_ENFORCE(c.InputSize("Cond") == 1, kInvalidArgument, c.Where(),
                        ": with is_scalar_condition = true, expected exactly one Cond var, but received ",
                        c.InputSize("Cond"));
          CheckCondition(c, "Cond");
        }
      })
      .GradMaker<ConditionalBlockGradMaker>()
      .ControlFlow();
  RegisterKernelForDTypes(registrar, "conditional_block", kAllDTypes, ConditionalBlockKernel, __FILE__, __LINE__);

  registrar.Op("conditional_block_grad", __FILE__, __LINE__)
      .Doc(
          "Gradient of conditional_block: runs the grad block in the scope the branch ran in and copies the "
          "gradients out; zeros (carried gradients unchanged) when the branch was not taken.")
      .Input("Cond", "(Tensors) the forward condition", kDuplicable | kDispensable)
      .Input("Input", "(Tensors) the forward inputs", kDuplicable | kDispensable)
      .Input("Out", "(Tensors) the forward outputs", kDuplicable | kDispensable)
      .Input("Out@GRAD", "(Tensors) gradients of the outputs the grad block reads", kDuplicable | kDispensable)
      .Input("Scope", "(step_scopes) the forward's scope", kNoBuffer)
      .Output("Input@GRAD", "(Tensors) gradients of Input", kDuplicable | kDispensable)
      .Output("Out@GRAD",
              "(Tensors) in place on the input of that name: gradients of the values Out vars not in Input had "
              "before the op (zero when the branch overwrote them)",
              kDuplicable | kDispensable)
      .RequiredAttr<BlockRef>("sub_block", "(block) the grad block")
      .Attr<bool>("is_scalar_condition", false, "(bool, default false) copied from conditional_block")
      .InferVarType([](const OpDesc& op, BlockDesc& block) {
        InferGradVarTypes(op, block, "Input");
        InferGradVarTypes(op, block, "Out");
      })
      .InferShape([](InferShapeContext& c) {
        InferGradShapes(c, "Input");
        InferGradShapes(c, "Out");
      })
      .GradMaker<EmptyGradOpDescMaker>()
      .ControlFlow();
  RegisterKernelForDTypes(registrar, "conditional_block_grad", kAllDTypes, ConditionalBlockGradKernel, __FILE__,
                          __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
