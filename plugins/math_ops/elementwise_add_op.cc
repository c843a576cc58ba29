// elementwise_add: Out = X + Y with Paddle's axis broadcasting.
#include <unordered_set>

#include "bias_activation_bf16.h"
#include "math_util.h"
#include "nabla/opkit/program_uses.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// Whether operand `a` (of an elementwise op with the other operand `b` and
// `axis`) is the output's shape for every shape the declared ones allow, so
// that its gradient is Out@GRAD itself. -1 dims must be ones `b` cannot
// widen: not covered by b, or facing a 1 of b. `a_is_x`: a is X (b is
// aligned onto it at axis); Y counts only at X's rank (aligned dim by dim).
bool NeverBroadcast(const Shape& a, const Shape& b, int axis, bool a_is_x) {
  if (a.size() < b.size() || (!a_is_x && a.size() != b.size())) return false;
  const int64_t start = a_is_x ? (axis < 0 ? static_cast<int64_t>(a.size() - b.size()) : axis) : 0;
  if (start < 0 || start + static_cast<int64_t>(b.size()) > static_cast<int64_t>(a.size())) return false;
  for (size_t d = 0; d < a.size(); ++d) {
    const int64_t at = static_cast<int64_t>(d) - start;
    if (at < 0 || at >= static_cast<int64_t>(b.size())) continue;  // b does not reach this dim
    const int64_t da = a[d], db = b[static_cast<size_t>(at)];
    const bool ok = (da > 1) || db == 1;  // a known > 1 stays; a 1 or -1 only beside a 1 of b
    if (!ok) return false;
  }
  return true;
}

// After the backward part (FuseGradOps): elementwise_add_grad copies
// Out@GRAD into the gradient of each operand that is not broadcast (a
// layer's pre-bias product, both sides of a residual add): a write and a
// read of activation-sized memory per operand, 2 % of the GPT block's
// training step (2 MiB each, 5 bias adds and 2 residuals). Where that
// gradient is written by this op alone, not kept and read in the root block
// only, its readers read Out@GRAD instead (written at most once, so the
// same values) and the op stops writing it; an op left with no output goes.
// The values are the copy's, except that a -0 of Out@GRAD is no longer
// written as +0 (the copy adds it to 0).
size_t PassAddGradientsThrough(ProgramDesc& program, const std::unordered_set<std::string>& keep) {
  BlockDesc& block = *program.Root();
  std::unordered_map<std::string, int> readers, writers;
  CountUses(program, readers, writers);
  auto one = [](const std::vector<std::string>& names) { return names.size() == 1 && names[0] != kEmptyVarName; };
  size_t changed = 0;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    OpDesc& op = *block.Op(i);
    if (op.Type() != "elementwise_add_grad" || !one(op.Input("Out@GRAD")) || !one(op.Input("X")) || !one(op.Input("Y")))
      continue;
    const std::string dout = op.Input("Out@GRAD")[0];
    const VarDesc* xv = block.FindVarRecursive(op.Input("X")[0]);
    const VarDesc* yv = block.FindVarRecursive(op.Input("Y")[0]);
    const VarDesc* gv = block.FindVarRecursive(dout);
    if (!xv || !yv || !gv || writers[dout] > 1) continue;
    const int axis = op.HasAttr("axis") ? op.Attr<int>("axis") : -1;
    bool rewired = false;
    for (const char* slot : {"X@GRAD", "Y@GRAD"}) {
      if (!op.HasOutput(slot) || !one(op.Output(slot))) continue;
      const std::string grad = op.Output(slot)[0];
      const bool is_x = slot[0] == 'X';
      const VarDesc* own = is_x ? xv : yv;
      const VarDesc* dv = block.FindVar(grad);
      if (!NeverBroadcast(own->GetShape(), (is_x ? yv : xv)->GetShape(), axis, is_x) || !dv || dv->Declared() ||
          dv->Persistable() || dv->GetDType() != gv->GetDType() || keep.count(grad) || writers[grad] != 1 ||
          grad == dout)
        continue;
      // Every reader in the root block (a sub-block's op reads it by name).
      int seen = 0;
      for (size_t j = i + 1; j < block.OpSize(); ++j) {
        const auto ins = block.Op(j)->InputArgumentNames();
        seen += static_cast<int>(std::count(ins.begin(), ins.end(), grad));
      }
      if (seen != readers[grad]) continue;
      for (size_t j = i + 1; j < block.OpSize(); ++j) block.Op(j)->RenameInput(grad, dout);
      op.SetOutput(slot, {kEmptyVarName});
      block.RemoveVar(grad);
      rewired = true;
      ++changed;
    }
    if (!rewired) continue;
    const auto outs = op.OutputArgumentNames();
    if (std::all_of(outs.begin(), outs.end(), [](const std::string& n) { return n == kEmptyVarName; })) {
      block.RemoveOps(i, i + 1);
      --i;
    }
    CountUses(program, readers, writers);
  }
  return changed;
}

NABLA_REGISTER_OPS(elementwise_add) {
  OpBuilder* grad = nullptr;
  RegisterElementwiseOp(
      registrar, "elementwise_add",
      "Out = X + Y. Y is broadcast onto X: its dims align with X's starting at `axis` (see the axis attribute).",
      __FILE__, __LINE__, /*int_kernels=*/true, [](auto x, auto y) { return x + y; },
      [](auto, auto, auto dout) { return dout; }, [](auto, auto, auto dout) { return dout; }, &grad)
      // bfloat16 (mixed precision, ElideBf16Casts): a layer's bias add
      // between a GEMM and the op after it, its bias kept float32.
      .InferShape(InferElementwiseShapeBf16Bias)
      .Bf16TakesFloat32({"Y"})
      .RewritesAfterBackward(ProgramPass{"pass_add_gradients_through", PassAddGradientsThrough})
      .GradCheck(CheckCase("same_shape", {CheckInput("X", {2, 3}), CheckInput("Y", {2, 3})}))
      .GradCheck(CheckCase("broadcast_axis1", {CheckInput("X", {2, 3, 4}), CheckInput("Y", {3})}, {{"axis", 1}}))
      .GradCheck(CheckCase("broadcast_trailing", {CheckInput("X", {2, 3, 4}), CheckInput("Y", {3, 4})}))
      .GradCheck(CheckCase("x_broadcast", {CheckInput("X", {4}), CheckInput("Y", {3, 4})}));
  grad->Bf16TakesFloat32({"Y", "Out@GRAD"});
  registrar.Kernel("elementwise_add", DeviceType::kCPU, DType::kBFloat16, BiasActForwardBf16<BiasAct::kIdentity>,
                   __FILE__, __LINE__);
  registrar.Kernel("elementwise_add_grad", DeviceType::kCPU, DType::kBFloat16, BiasActBackwardBf16<BiasAct::kIdentity>,
                   __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
