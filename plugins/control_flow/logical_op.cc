// The logical family (Paddle's logical_op.cc): logical_and, logical_or,
// logical_xor (X, Y -> Out, Y broadcast onto X) and logical_not (X -> Out),
// over bool tensors. No gradient.
#include <functional>

#include "control_flow_util.h"
#include "nabla/plugin.h"

namespace nabla::control_flow {
namespace {

void RequireBool(DType d, const std::string& slot, const std::string& where) {
  NABLA_ENFORCE(d == DType::kBool, kInvalidArgument, where, ": ", slot, " must be a bool tensor, but received ",
                DTypeName(d), " (compare with less_than, equal, ... or cast first)");
}

template <typename Op>
void BinaryKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const std::string where = StrCat("op '", ctx.Op().Type(), "'");
  RequireBool(x.GetDType(), "X", where);
  RequireBool(y.GetDType(), "Y", where);
  std::vector<int64_t> yi = BroadcastYOntoX(x.GetShape(), y.GetShape(), -1, where);
  bool* out = ctx.Output("Out")->Allocate<bool>(ctx.GetDevice(), x.GetShape());
  const bool* a = x.Data<bool>();
  const bool* b = y.Data<bool>();
  Op op;
  for (size_t i = 0; i < yi.size(); ++i) out[i] = op(a[i], b[yi[i]]);
}

void NotKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  RequireBool(x.GetDType(), "X", "op 'logical_not'");
  bool* out = ctx.Output("Out")->Allocate<bool>(ctx.GetDevice(), x.GetShape());
  const bool* a = x.Data<bool>();
  for (int64_t i = 0, n = x.Numel(); i < n; ++i) out[i] = !a[i];
}

struct Xor {
  bool operator()(bool a, bool b) const { return a != b; }
};

template <typename Op>
void RegisterBinary(Registrar& registrar, const std::string& type, const std::string& doc, const char* file, int line) {
  registrar.Op(type, file, line)
      .Doc(doc + " Elementwise over bool tensors; Y is broadcast onto X (aligned with X's last dims).")
      .Input("X", "(bool Tensor) left operand")
      .Input("Y", "(bool Tensor) right operand")
      .Output("Out", "(bool Tensor) X's shape")
      .InferShape([](InferShapeContext& c) {
        RequireBool(c.InputDType("X"), "X", c.Where());
        RequireBool(c.InputDType("Y"), "Y", c.Where());
        CheckBroadcast(c.InputShape("X"), c.InputShape("Y"), -1, c.Where());
        c.ShareShapeAndDType("X", "Out");
      })
      // Always the bool kernel, so a wrong dtype gets the message above.
      .KernelDType([](const ExecutionContext&) { return DType::kBool; })
      .template GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel(type, DeviceType::kCPU, DType::kBool, BinaryKernel<Op>, file, line);
}

NABLA_REGISTER_OPS(logical_ops) {
  RegisterBinary<std::logical_and<bool>>(registrar, "logical_and", "Out = X && Y.", __FILE__, __LINE__);
  RegisterBinary<std::logical_or<bool>>(registrar, "logical_or", "Out = X || Y.", __FILE__, __LINE__);
  RegisterBinary<Xor>(registrar, "logical_xor", "Out = X != Y.", __FILE__, __LINE__);
  registrar.Op("logical_not", __FILE__, __LINE__)
      .Doc("Out = !X, elementwise over a bool tensor.")
      .Input("X", "(bool Tensor) operand")
      .Output("Out", "(bool Tensor) X's shape")
      .InferShape([](InferShapeContext& c) {
        RequireBool(c.InputDType("X"), "X", c.Where());
        c.ShareShapeAndDType("X", "Out");
      })
      .KernelDType([](const ExecutionContext&) { return DType::kBool; })
      .GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel("logical_not", DeviceType::kCPU, DType::kBool, NotKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
