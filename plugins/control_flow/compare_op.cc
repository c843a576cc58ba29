// The comparison family (Paddle's compare_op.cc): less_than, less_equal,
// greater_than, greater_equal, equal, not_equal. X, Y -> Out (bool, X's
// shape), Y broadcast onto X at `axis`. They build loop conditions, so they
// have no gradient.
#include <functional>

#include "control_flow_util.h"
#include "nabla/plugin.h"

namespace nabla::control_flow {
namespace {

template <typename T, typename Cmp>
void CompareKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const std::string where = StrCat("op '", ctx.Op().Type(), "'");
  NABLA_ENFORCE(y.GetDType() == x.GetDType(), kInvalidArgument, where,
                ": X and Y must have the same dtype, but received X ", x.DebugString(), " and Y ", y.DebugString());
  std::vector<int64_t> yi = BroadcastYOntoX(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), where);
  bool* out = ctx.Output("Out")->Allocate<bool>(ctx.GetDevice(), x.GetShape());
  const T* a = x.Data<T>();
  const T* b = y.Data<T>();
  Cmp cmp;
  for (size_t i = 0; i < yi.size(); ++i) out[i] = cmp(a[i], b[yi[i]]);
}

template <template <typename> class Cmp>
void RegisterCompare(Registrar& registrar, const std::string& type, const std::string& doc, bool with_bool,
                     const char* file, int line) {
  registrar.Op(type, file, line)
      .Doc(doc + " Elementwise; Y is broadcast onto X (see axis). Out has X's shape and is bool.")
      .Input("X", "(Tensor) left operand")
      .Input("Y", "(Tensor) right operand, same dtype as X")
      .Output("Out", "(bool Tensor) the comparison, X's shape")
      .Attr<int>("axis", -1, "(int, default -1) the X dim Y's first dim aligns with; -1: Y aligns with X's last dims")
      .InferShape([](InferShapeContext& c) {
        Shape x = c.InputShape("X");
        CheckBroadcast(x, c.InputShape("Y"), c.Attr<int>("axis"), c.Where());
        DType dx = c.InputDType("X"), dy = c.InputDType("Y");
        NABLA_ENFORCE(dx == dy, kInvalidArgument, c.Where(), ": X and Y must have the same dtype, but received ",
                      DTypeName(dx), " and ", DTypeName(dy));
        c.SetOutputShape("Out", x);
        c.SetOutputDType("Out", DType::kBool);
      })
      .template GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel(type, DeviceType::kCPU, DType::kFloat32, CompareKernel<float, Cmp<float>>, file, line);
  registrar.Kernel(type, DeviceType::kCPU, DType::kFloat64, CompareKernel<double, Cmp<double>>, file, line);
  registrar.Kernel(type, DeviceType::kCPU, DType::kInt32, CompareKernel<int32_t, Cmp<int32_t>>, file, line);
  registrar.Kernel(type, DeviceType::kCPU, DType::kInt64, CompareKernel<int64_t, Cmp<int64_t>>, file, line);
  if (with_bool) registrar.Kernel(type, DeviceType::kCPU, DType::kBool, CompareKernel<bool, Cmp<bool>>, file, line);
}

NABLA_REGISTER_OPS(compare_ops) {
  RegisterCompare<std::less>(registrar, "less_than", "Out = X < Y.", false, __FILE__, __LINE__);
  RegisterCompare<std::less_equal>(registrar, "less_equal", "Out = X <= Y.", false, __FILE__, __LINE__);
  RegisterCompare<std::greater>(registrar, "greater_than", "Out = X > Y.", false, __FILE__, __LINE__);
  RegisterCompare<std::greater_equal>(registrar, "greater_equal", "Out = X >= Y.", false, __FILE__, __LINE__);
  RegisterCompare<std::equal_to>(registrar, "equal", "Out = X == Y.", true, __FILE__, __LINE__);
  RegisterCompare<std::not_equal_to>(registrar, "not_equal", "Out = X != Y.", true, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::control_flow
