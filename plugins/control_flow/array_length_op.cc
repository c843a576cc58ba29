// array_length: Out = the number of entries of tensor array X (int64, [1]).
#include "control_flow_util.h"
#include "nabla/plugin.h"
#include "var_util.h"

namespace nabla::control_flow {
namespace {

void ArrayLengthKernel(const ExecutionContext& ctx) {
  const Variable* x = ctx.InputVar("X");
  NABLA_ENFORCE(x->Type() == VarType::kTensorArray, kInvalidArgument, "op 'array_length': X '",
                ctx.Op().Input("X").at(0), "' must be a tensor_array, but received a ", VarTypeName(x->Type()), " var");
  *ctx.Output("Out")->Allocate<int64_t>(ctx.GetDevice(), {1}) = static_cast<int64_t>(ArraySize(*x));
}

NABLA_REGISTER_OPS(array_length) {
  registrar.Op("array_length", __FILE__, __LINE__)
      .Doc("Out = the number of entries of the tensor array X, as an int64 tensor of shape [1].")
      .Input("X", "(tensor_array) the array", kNoBuffer)
      .Output("Out", "(int64 Tensor, [1]) its length")
      .InferShape([](InferShapeContext& c) {
        if (!c.IsRuntime())
          NABLA_ENFORCE(c.InputVarType("X") == VarType::kTensorArray, kInvalidArgument, c.Where(),
                        ": X must be a tensor_array, but received a ", VarTypeName(c.InputVarType("X")), " var");
        c.SetOutputShape("Out", {1});
        c.SetOutputDType("Out", DType::kInt64);
      })
      .KernelDType([](const ExecutionContext&) { return DType::kInt64; })
      .ArrayIO()
      .GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel("array_length", DeviceType::kCPU, DType::kInt64, ArrayLengthKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
