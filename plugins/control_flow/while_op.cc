// while: runs its sub_block while Condition holds, one child scope per
// iteration (kept in StepScopes for the gradient unless is_test), and
// while_grad: walks those scopes in reverse, running the grad block in each.
#include "nabla/plugin.h"
#include "sub_block_util.h"

namespace nabla::control_flow {
namespace {

void DropStepScopes(Scope& scope, Variable* step_scopes) {
  // Step scopes are children of the scope the op ran in; DeleteScope ignores
  // anything that is not (no pointer is dereferenced).
  for (Scope* s : step_scopes->GetStepScopes()) scope.DeleteScope(s);
  step_scopes->GetStepScopes().clear();
}

void WhileKernel(const ExecutionContext& ctx) {
  const OpDesc& op = ctx.Op();
  const int block_idx = op.Attr<BlockRef>("sub_block").idx;
  const bool is_test = op.Attr<bool>("is_test");
  const RunContext* run = ctx.Run();
  const int64_t cap = run != nullptr && run->options != nullptr ? run->options->max_loop_iterations
                                                                : ExecutorOptions{}.max_loop_iterations;
  Scope& scope = ctx.GetScope();
  Variable* step_scopes = ctx.OutputVar("StepScopes");
  if (step_scopes != nullptr) {
    DropStepScopes(scope, step_scopes);
    step_scopes->SetType(VarType::kStepScopes);
  }
  const bool keep = !is_test && step_scopes != nullptr;
  const std::vector<std::string> carried =
      keep ? CarriedNames(op.Input("X"), op.Output("Out")) : std::vector<std::string>{};
  const std::string what = StrCat("op 'while': Condition '", op.Input("Condition").at(0), "'");
  int64_t iterations = 0;
  while (ReadScalarBool(ctx.Input("Condition"), what)) {
    NABLA_ENFORCE(iterations < cap, kOutOfRange, "op 'while' (sub_block ", block_idx,
                  ") exceeded the iteration cap: "
                  "expected its Condition '",
                  op.Input("Condition").at(0), "' to turn false within ", "max_loop_iterations = ", cap,
                  " iterations, but it still held after ", iterations,
                  " (raise ExecutorOptions::max_loop_iterations if the loop is meant to run longer)");
    ++iterations;
    Scope& step = RunForwardStep(ctx, block_idx, scope, carried, keep);
    if (keep) {
      step_scopes->GetStepScopes().push_back(&step);
    } else {
      scope.DeleteScope(&step);
    }
  }
}

void WhileGradKernel(const ExecutionContext& ctx) {
  const OpDesc& op = ctx.Op();
  NABLA_ENFORCE(!op.Attr<bool>("is_test"), kPreconditionNotMet,
                "op 'while_grad': the forward while has is_test = true, so it kept no step scopes: expected "
                "is_test = false in a program that is differentiated, but received true");
  const RunContext* run = ctx.Run();
  NABLA_ENFORCE(run != nullptr && run->program != nullptr, kPreconditionNotMet,
                "op 'while_grad' runs a sub-block but was not started by an executor");
  GradBlockPlan plan = PlanGradBlock(*run->program, op.Attr<BlockRef>("sub_block").idx);
  Scope& scope = ctx.GetScope();
  Device& device = ctx.GetDevice();
  // A std::vector<Scope*>& in the standard build, a view over the C ABI.
  auto&& steps = ctx.InputVar("StepScopes")->GetStepScopes();
  std::vector<InputGradSlot> slots = InputGradSlots(ctx, plan, "X", StrCat("X", kGradSuffix), "Out");
  std::vector<OutputGradSource> og = OutputGradSources(ctx, slots, "Out");
  // Gradients of vars the loop only reads accumulate over the steps from
  // zero; a carried var's gradient starts as the gradient of its final value.
  for (const auto& s : slots) {
    if (s.carried) continue;
    const Variable* fwd = scope.FindVar(s.fwd);
    NABLA_ENFORCE(fwd != nullptr && HasValue(*fwd), kPreconditionNotMet, "op 'while_grad': input '", s.fwd,
                  "' has no value, so its gradient '", s.grad, "' cannot be shaped; did the forward while run?");
    ZeroVarLike(*fwd, s.outer, device);
  }
  const bool any_step = !steps.empty();
  while (!steps.empty()) {
    Scope* step = steps.back();
    RunGradStep(ctx, plan, *step, scope, og);
    CollectStepGrads(slots, *step, device, StrCat("op 'while_grad' at step ", steps.size() - 1));
    AfterStep(og, *step, device);
    // The step's values are spent: free them now, not at the next forward.
    scope.DeleteScope(step);
    steps.pop_back();
  }
  FinishOverwritten(og, any_step, scope, device);
}

class WhileGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    NABLA_ENFORCE(!Output("StepScopes").empty() && Output("StepScopes")[0] != kEmptyVarName, kInvalidArgument,
                  "op 'while' is differentiated but has no StepScopes output: expected a var of type step_scopes "
                  "in slot StepScopes (it keeps each iteration's values for the gradient), but received none");
    NABLA_ENFORCE(!Attr<bool>("is_test"), kInvalidArgument,
                  "op 'while' is differentiated but has is_test = true (it keeps no step scopes): expected false");
    return MakeSubBlockGradOp(ForwardOp(), GradBlock(0), {"X"}, "X", "Out", "StepScopes", InputGrad("X"),
                              OutputGrad("Out"));
  }
};

NABLA_REGISTER_OPS(while_op) {
  registrar.Op("while", __FILE__, __LINE__)
      .Doc(
          "Runs sub_block while Condition (a one-element bool tensor the block updates) holds. Each iteration runs "
          "in a new child scope: vars the sub-block declares are local to it, outer vars are updated in place. "
          "Unless is_test, the scopes are kept in StepScopes, each holding the values the carried vars (in both X "
          "and Out) had before its iteration, for while_grad.")
      .Input("X", "(Tensors) every outer var the sub-block reads", kDuplicable | kDispensable)
      .Input("Condition", "(bool tensor, one element) the loop condition, recomputed by the sub-block")
      .Output("Out", "(Tensors) every outer var the sub-block writes", kDuplicable | kDispensable)
      .Output("StepScopes", "(step_scopes) one child scope per iteration, for the gradient", kDispensable)
      .RequiredAttr<BlockRef>("sub_block", "(block) the loop body")
      .Attr<bool>("is_test", false, "(bool, default false) inference: drop each iteration's scope at once")
      .InferVarType([](const OpDesc& op, BlockDesc& block) {
        for (const auto& name : op.Output("StepScopes"))
          if (name != kEmptyVarName) block.Var(name)->SetType(VarType::kStepScopes);
        int idx = op.Attr<BlockRef>("sub_block").idx;
        const ProgramDesc* program = block.Program();
        NABLA_ENFORCE(program != nullptr && idx > 0 && static_cast<size_t>(idx) < program->Size(), kInvalidArgument,
                      "op 'while': attribute sub_block must name a sub-block of the program (1..",
                      program ? program->Size() - 1 : 0, "), but received ", idx);
        CheckSubBlockSlots(op, *program->Block(static_cast<size_t>(idx)), {"X", "Condition"}, "Out");
      })
      .InferShape([](InferShapeContext& c) { CheckCondition(c, "Condition"); })
      .GradMaker<WhileGradMaker>()
      .ControlFlow();
  RegisterKernelForDTypes(registrar, "while", kAllDTypes, WhileKernel, __FILE__, __LINE__);

  registrar.Op("while_grad", __FILE__, __LINE__)
      .Doc(
          "Gradient of while: runs the grad block in each kept step scope, last iteration first. Gradients of "
          "vars the loop only reads are accumulated from zero; a carried var's gradient is handed from step to "
          "step. The step scopes are freed as they are used.")
      .Input("X", "(Tensors) the forward inputs", kDuplicable | kDispensable)
      .Input("Out", "(Tensors) the forward outputs", kDuplicable | kDispensable)
      .Input("Out@GRAD", "(Tensors) gradients of the outputs the grad block reads", kDuplicable | kDispensable)
      .Input("StepScopes", "(step_scopes) the forward's scopes", kNoBuffer)
      .Output("X@GRAD", "(Tensors) gradients of X", kDuplicable | kDispensable)
      .Output("Out@GRAD",
              "(Tensors) in place on the input of that name: gradients of the values Out vars not in X had before "
              "the loop (zero once an iteration overwrote them)",
              kDuplicable | kDispensable)
      .RequiredAttr<BlockRef>("sub_block", "(block) the grad block")
      .Attr<bool>("is_test", false, "(bool, default false) copied from while; must be false")
      .InferVarType([](const OpDesc& op, BlockDesc& block) {
        InferGradVarTypes(op, block, "X");
        InferGradVarTypes(op, block, "Out");
      })
      .InferShape([](InferShapeContext& c) {
        InferGradShapes(c, "X");
        InferGradShapes(c, "Out");
      })
      .GradMaker<EmptyGradOpDescMaker>()
      .ControlFlow();
  RegisterKernelForDTypes(registrar, "while_grad", kAllDTypes, WhileGradKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
