// The op plugin frozen at version 6 of nabla's C ABI (tests/plugins/abi_v6):
// what version 6 added, each used at least once.
//   abi_v6_repeat: runs its sub_block (a block attribute, NABLA_C_ATTR_BLOCK)
//     `times` times, each time in a new child scope of the op's
//     (kernel_scope, scope_new_child, kernel_run_block), refusing more than
//     the run's max_loop_iterations (kernel_run_option); the scopes are kept
//     in StepScopes (var_step_scope_push) and dropped when the op runs again
//     (var_step_scope_count, var_step_scope, var_step_scopes_truncate,
//     scope_delete_child). Before each run it stores the step number in a
//     var of the child scope, `step` (scope_var), which the block may read,
//     and afterwards checks that the block's own vars stayed in the child
//     (scope_find_var, local and not) and counts them in Locals. The
//     program is read through the run's read-only view (kernel_program):
//     Locals[1] = how many vars the sub_block declares. A var of no scope
//     (var_new, var_free) holds the count while it runs. Registered as
//     control flow (op_traits' NABLA_C_TRAIT_CONTROL_FLOW).
//   Its grad maker reads the grad block the backward builder made
//   (grad_block, grad_program) and emits abi_v6_repeat_grad with that block
//   as its sub_block and the block's op count as `grad_ops`; the grad op's
//   kernel reads both back (op_get_block_attr) and gives X@GRAD = Out@GRAD *
//   scale^times, the gradient of a block that scales X by `scale` (an
//   attribute it must carry). A times < 0 is refused with the op's place
//   in its YAML file (op_pos, pass_where).
// Never edit this file (README.md).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nabla/executor.h"
#include "nabla/plugin.h"
#include "nabla/program.h"
#include "nabla/scope.h"

namespace {

using nabla::BlockRef;
using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;
using nabla::Scope;
using nabla::Tensor;
using nabla::Variable;

void RepeatKernel(const ExecutionContext& ctx) {
  const nabla::OpDesc& op = ctx.Op();
  const int block = op.Attr<BlockRef>("sub_block").idx;
  const int times = op.Attr<int>("times");
  const nabla::RunContext* run = ctx.Run();
  NABLA_ENFORCE(run != nullptr && run->program != nullptr, kPreconditionNotMet,
                "abi_v6_repeat runs a block but no executor started it");
  const std::string where = run->program->Where(op.Pos());
  NABLA_ENFORCE(times >= 0, kInvalidArgument, where, ": abi_v6_repeat: times must be >= 0, but received ", times);
  NABLA_ENFORCE(times <= run->options->max_loop_iterations, kOutOfRange, where, ": abi_v6_repeat: times ", times,
                " is over max_loop_iterations = ", run->options->max_loop_iterations);
  Scope& scope = ctx.GetScope();
  Variable* kept = ctx.OutputVar("StepScopes");
  for (Scope* s : kept->GetStepScopes()) scope.DeleteScope(s);
  kept->GetStepScopes().clear();
  kept->SetType(nabla::VarType::kStepScopes);
  const nabla::BlockDesc& body = *run->program->Block(static_cast<size_t>(block));
  std::shared_ptr<Variable> locals = nabla::NewVariable();
  double* count = locals->GetTensor().Allocate<double>(ctx.GetDevice(), {2});
  count[0] = 0;
  count[1] = static_cast<double>(body.AllVars().size());
  for (int t = 0; t < times; ++t) {
    Scope& step = scope.NewScope();
    double* s = step.Var("step")->GetTensor().Allocate<double>(ctx.GetDevice(), {1});
    s[0] = t;
    ctx.RunBlock(block, step);
    for (const auto& v : body.AllVars()) {
      NABLA_ENFORCE(step.FindLocalVar(v->Name()) != nullptr || step.FindVar(v->Name()) == nullptr, kRuntime,
                    "abi_v6_repeat: the block's var '", v->Name(), "' left its step scope");
      if (step.FindLocalVar(v->Name()) != nullptr) count[0] += 1;
    }
    kept->GetStepScopes().push_back(&step);
  }
  ctx.Output("Locals")->CopyFrom(locals->GetTensor(), ctx.GetDevice());
}

template <typename T>
void RepeatGradKernel(const ExecutionContext& ctx) {
  const nabla::OpDesc& op = ctx.Op();
  NABLA_ENFORCE(op.Attr<BlockRef>("sub_block").idx > 0, kInvalidArgument, "abi_v6_repeat_grad: no grad block");
  NABLA_ENFORCE(op.Attr<int>("grad_ops") > 0, kInvalidArgument, "abi_v6_repeat_grad: an empty grad block");
  const double factor = std::pow(static_cast<double>(op.Attr<float>("scale")), op.Attr<int>("times"));
  const Tensor& dout = ctx.Input("Out@GRAD");
  Tensor* dx = ctx.Output("X@GRAD");
  T* out = dx->Allocate<T>(ctx.GetDevice(), dout.GetShape());
  const T* in = dout.Data<T>();
  for (int64_t i = 0; i < dout.Numel(); ++i) out[i] = static_cast<T>(in[i] * factor);
  // The forward's scopes are spent.
  Variable* kept = ctx.InputVar("StepScopes");
  for (Scope* s : kept->GetStepScopes()) ctx.GetScope().DeleteScope(s);
  kept->GetStepScopes().clear();
}

class RepeatGradMaker : public nabla::GradOpDescMakerBase {
 public:
  using nabla::GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<nabla::OpDesc>> operator()() const override {
    const nabla::BlockDesc* grad = GradBlock(0);
    auto op = std::make_unique<nabla::OpDesc>();
    op->SetType("abi_v6_repeat_grad");
    op->SetInput("Out@GRAD", OutputGrad("Out"));
    op->SetInput("StepScopes", Output("StepScopes"));
    op->SetOutput("X@GRAD", InputGrad("X"));
    op->SetAttr("sub_block", BlockRef{grad->Idx()});
    op->SetAttr("grad_ops", static_cast<int>(grad->OpSize()));
    op->SetAttr("times", Attr<int>("times"));
    op->SetAttr("scale", Attr<float>("scale"));
    std::vector<std::unique_ptr<nabla::OpDesc>> ops;
    ops.push_back(std::move(op));
    return ops;
  }
};

}  // namespace

NABLA_REGISTER_OPS(abi_v6_ops) {
  registrar.Op("abi_v6_repeat", __FILE__, __LINE__)
      .Doc(
          "Runs sub_block `times` times, each in a child scope kept in StepScopes; Out is X, which the block "
          "updates in place (it must scale it by `scale`); Locals = [vars the steps kept local, vars the block "
          "declares].")
      .Input("X", "(Tensor) the var the block updates")
      .Output("Out", "(Tensor) X after the steps")
      .Output("StepScopes", "(step_scopes) one scope per step")
      .Output("Locals", "(Tensor) float64 [2]")
      .RequiredAttr<BlockRef>("sub_block", "(block) the body")
      .Attr<int>("times", 1, "(int) how many steps")
      .Attr<float>("scale", 1.0f, "(float) what the body scales X by, for the gradient")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Locals", {2});
        c.SetOutputDType("Locals", DType::kFloat64);
      })
      .GradMaker<RepeatGradMaker>()
      .ControlFlow();
  for (const DType dtype : {DType::kFloat32, DType::kFloat64})
    registrar.Kernel("abi_v6_repeat", nabla::DeviceType::kCPU, dtype, RepeatKernel, __FILE__, __LINE__);

  registrar.Op("abi_v6_repeat_grad", __FILE__, __LINE__)
      .Doc("X@GRAD = Out@GRAD * scale^times; frees the forward's scopes.")
      .Input("Out@GRAD", "(Tensor)")
      .Input("StepScopes", "(step_scopes) the forward's", nabla::kNoBuffer)
      .Output("X@GRAD", "(Tensor)")
      .RequiredAttr<BlockRef>("sub_block", "(block) the grad block")
      .Attr<int>("grad_ops", 0, "(int) ops in the grad block")
      .Attr<int>("times", 1, "(int) from the forward")
      .Attr<float>("scale", 1.0f, "(float) from the forward")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("Out@GRAD", "X@GRAD"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v6_repeat_grad", nabla::DeviceType::kCPU, DType::kFloat32, RepeatGradKernel<float>, __FILE__,
                   __LINE__);
  registrar.Kernel("abi_v6_repeat_grad", nabla::DeviceType::kCPU, DType::kFloat64, RepeatGradKernel<double>, __FILE__,
                   __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
