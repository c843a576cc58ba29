// write_to_array: Out[I] = X, growing the tensor array Out as needed.
// Gradient: X@GRAD = Out@GRAD[I] (zeros where that entry has no gradient).
#include "control_flow_util.h"
#include "nabla/plugin.h"
#include "var_util.h"

namespace nabla::control_flow {
namespace {

void WriteToArrayKernel(const ExecutionContext& ctx) {
  size_t i = ReadArrayIndex(ctx.Input("I"), "op 'write_to_array'");
  const Tensor& x = ctx.Input("X");
  Variable* out = ctx.OutputVar("Out");
  MakeTensorArray(out);
  if (ArraySize(*out) <= i) ResizeArray(out, i + 1);
  // A fresh buffer per write: a kept step scope may share the old entry.
  Tensor& entry = ArrayEntry(*out, i);
  ResetTensor(&entry);
  entry.CopyFrom(x, ctx.GetDevice());
}

void WriteToArrayGradKernel(const ExecutionContext& ctx) {
  size_t i = ReadArrayIndex(ctx.Input("I"), "op 'write_to_array_grad'");
  Tensor* dx = ctx.Output("X@GRAD");
  const Variable* dout = ctx.InputVar("Out@GRAD");
  if (dout->Type() == VarType::kTensorArray && i < ArraySize(*dout) && ArrayEntry(*dout, i).IsInitialized()) {
    dx->CopyFrom(ArrayEntry(*dout, i), ctx.GetDevice());
    return;
  }
  // Nothing read that entry after the write: its gradient is zero.
  ZeroTensorLike(*ctx.InputVar("X"), dx, ctx.GetDevice());
}

std::unique_ptr<OpDesc> WriteToArrayGradOp(const GradContext& g, const std::vector<std::string>& dx) {
  return MakeOp("write_to_array_grad", {{"X", g.Input("X")}, {"I", g.Input("I")}, {"Out@GRAD", g.OutputGrad("Out")}},
                {{"X@GRAD", dx}});
}

NABLA_REGISTER_OPS(write_to_array) {
  registrar.Op("write_to_array", __FILE__, __LINE__)
      .Doc(
          "Out[I] = a copy of X. Out is a tensor array (var type tensor_array); it grows to I + 1 entries, and "
          "entries never written stay empty.")
      .Input("X", "(Tensor) the value")
      .Input("I", "(int64 Tensor, one element) the index")
      .Output("Out", "(tensor_array) the array written")
      .InferVarType([](const OpDesc& op, BlockDesc& block) {
        VarDesc* out = block.FindVarRecursive(op.Output("Out").at(0));
        const VarDesc* x = block.FindVarRecursive(op.Input("X").at(0));
        if (out == nullptr) return;
        out->SetType(VarType::kTensorArray);
        if (x != nullptr && x->HasDType()) {
          out->SetDType(x->GetDType());
          out->MarkDTypeKnown(true);
        }
      })
      .InferShape([](InferShapeContext& c) {
        CheckIndexSlot(c, "I");
        // An array var's shape is its entries' shape.
        if (!c.IsRuntime()) c.ShareShapeAndDType("X", "Out");
      })
      .KernelDType([](const ExecutionContext& ctx) { return ctx.Input("X").GetDType(); })
      .ArrayIO()
      .GradMaker(OneGradOpIfWanted("X", WriteToArrayGradOp));
  RegisterKernelForDTypes(registrar, "write_to_array", kAllDTypes, WriteToArrayKernel, __FILE__, __LINE__);

  registrar.Op("write_to_array_grad", __FILE__, __LINE__)
      .Doc("Gradient of write_to_array: X@GRAD = Out@GRAD[I], zeros where that entry has no gradient.")
      .Input("X", "(Tensor) the forward value, for the shape of a zero gradient", kNoBuffer)
      .Input("I", "(int64 Tensor, one element) the index")
      .Input("Out@GRAD", "(tensor_array) gradient of the array")
      .Output("X@GRAD", "(Tensor) gradient of X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "X@GRAD"); })
      .KernelDType([](const ExecutionContext& ctx) { return ctx.InputVar("X")->GetTensor().GetDType(); })
      .GradMaker<EmptyGradOpDescMaker>();
  RegisterKernelForDTypes(registrar, "write_to_array_grad", kAllDTypes, WriteToArrayGradKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
