// read_from_array: Out = a copy of X[I] for a tensor array X. Gradient: adds
// Out@GRAD into entry I of X@GRAD (a sparse array: missing entries are zero).
#include "control_flow_util.h"
#include "nabla/plugin.h"
#include "var_util.h"

namespace nabla::control_flow {
namespace {

const Variable& ArrayOf(const Variable& v, const std::string& name, const std::string& where) {
  NABLA_ENFORCE(v.Type() == VarType::kTensorArray, kInvalidArgument, where, ": X '", name,
                "' must be a tensor_array (written by write_to_array), but received a ", VarTypeName(v.Type()), " var");
  return v;
}

void ReadFromArrayKernel(const ExecutionContext& ctx) {
  const std::string where = "op 'read_from_array'";
  const std::string& name = ctx.Op().Input("X").at(0);
  const Variable& array = ArrayOf(*ctx.InputVar("X"), name, where);
  size_t i = ReadArrayIndex(ctx.Input("I"), where);
  NABLA_ENFORCE(i < ArraySize(array), kOutOfRange, where, ": index I = ", i, " is out of range for array '", name,
                "': expected I < its length ", ArraySize(array));
  const Tensor& entry = ArrayEntry(array, i);
  NABLA_ENFORCE(entry.IsInitialized(), kPreconditionNotMet, where, ": entry ", i, " of array '", name,
                "' was never written: expected write_to_array to set it before it is read");
  ctx.Output("Out")->CopyFrom(entry, ctx.GetDevice());
}

// Reads and writes X@GRAD (in place), so several reads of one array add up
// without a `sum` over arrays. A dense X@GRAD (a zero fill the backward
// builder inserted) starts a fresh array.
void ReadFromArrayGradKernel(const ExecutionContext& ctx) {
  size_t i = ReadArrayIndex(ctx.Input("I"), "op 'read_from_array_grad'");
  Variable* dx = ctx.OutputVar("X@GRAD");
  const Variable* prev = ctx.HasInput("X@GRAD") ? ctx.InputVar("X@GRAD") : nullptr;
  if (prev != nullptr && prev != dx && prev->Type() == VarType::kTensorArray) {
    CopyVar(*prev, dx, ctx.GetDevice());  // the builder renamed the output apart from the input
  } else if (prev != dx || dx->Type() != VarType::kTensorArray) {
    dx->SetType(VarType::kTensorArray);
    ResizeArray(dx, 0);
  }
  AccumulateArrayEntry(dx, i, ctx.Input("Out@GRAD"), ctx.GetDevice(), "read_from_array_grad");
}

std::unique_ptr<OpDesc> ReadFromArrayGradOp(const GradContext& g, const std::vector<std::string>& dx) {
  return MakeOp("read_from_array_grad",
                {{"I", g.Input("I")}, {"Out@GRAD", g.OutputGrad("Out")}, {"X", g.Input("X")}, {"X@GRAD", dx}},
                {{"X@GRAD", dx}});
}

NABLA_REGISTER_OPS(read_from_array) {
  registrar.Op("read_from_array", __FILE__, __LINE__)
      .Doc("Out = a copy of X[I], X a tensor array. An index past the end, or an entry never written, is an error.")
      .Input("X", "(tensor_array) the array")
      .Input("I", "(int64 Tensor, one element) the index")
      .Output("Out", "(Tensor) the entry")
      .InferShape([](InferShapeContext& c) {
        CheckIndexSlot(c, "I");
        if (c.IsRuntime()) return;  // an array's entries are sized by the kernel
        NABLA_ENFORCE(c.InputVarType("X") == VarType::kTensorArray, kInvalidArgument, c.Where(),
                      ": X must be a tensor_array, but received a ", VarTypeName(c.InputVarType("X")), " var");
        c.ShareShapeAndDType("X", "Out");
      })
      .KernelDType([](const ExecutionContext&) { return DType::kFloat32; })
      .ArrayIO()
      .GradMaker(OneGradOpIfWanted("X", ReadFromArrayGradOp));
  registrar.Kernel("read_from_array", DeviceType::kCPU, DType::kFloat32, ReadFromArrayKernel, __FILE__, __LINE__);

  registrar.Op("read_from_array_grad", __FILE__, __LINE__)
      .Doc("Gradient of read_from_array: X@GRAD[I] += Out@GRAD, in place on X@GRAD (missing entries are zero).")
      .Input("I", "(int64 Tensor, one element) the index")
      .Input("Out@GRAD", "(Tensor) gradient of the entry read")
      .Input("X", "(tensor_array) the forward array", kNoBuffer)
      .Input("X@GRAD", "(tensor_array) the gradient so far (the same var as the output)", kDispensable)
      .Output("X@GRAD", "(tensor_array) gradient of X")
      .InferVarType([](const OpDesc& op, BlockDesc& block) {
        if (VarDesc* g = block.FindVarRecursive(op.Output("X@GRAD").at(0))) g->SetType(VarType::kTensorArray);
      })
      .InferShape([](InferShapeContext& c) {
        if (!c.IsRuntime()) c.ShareShapeAndDType("Out@GRAD", "X@GRAD");
      })
      .KernelDType([](const ExecutionContext&) { return DType::kFloat32; })
      .UpdatesInPlace()  // X@GRAD accumulates in place
      .GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel("read_from_array_grad", DeviceType::kCPU, DType::kFloat32, ReadFromArrayGradKernel, __FILE__,
                   __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
