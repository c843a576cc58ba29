// uniform_random: a tensor of uniform random values in [min, max), with
// Paddle's diag_num/diag_step/diag_val: after the fill, element
// i * diag_step + i (row-major) is set to diag_val for i in [0, diag_num),
// a diagonal of a [diag_num, diag_step + 1]-strided view.
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(uniform_random) {
  RegisterRandomOp(
      registrar, "uniform_random",
      "Out = values drawn uniformly from [min, max); then Out[i * diag_step + i] = diag_val (flat index) for i "
      "in [0, diag_num).",
      __FILE__, __LINE__,
      [](const ExecutionContext& ctx) {
        double lo = ctx.Attr<float>("min"), hi = ctx.Attr<float>("max");
        NABLA_ENFORCE(lo <= hi, kInvalidArgument, "op 'uniform_random': expected min <= max, but received min ", lo,
                      " and max ", hi);
        const int64_t diag_num = ctx.Attr<int>("diag_num"), diag_step = ctx.Attr<int>("diag_step");
        const double diag_val = ctx.Attr<float>("diag_val");
        const int64_t size = NumElements(CreatedShape(ctx));  // the attribute or ShapeTensor(List)
        // The attribute checker runs in the verifier; a program run without
        // it must not reach the modulo by diag_step + 1 = 0 either.
        NABLA_ENFORCE(diag_step >= 0, kInvalidArgument,
                      "op 'uniform_random': attribute diag_step must be >= 0, but received ", diag_step);
        NABLA_ENFORCE(diag_num <= 0 || (diag_num - 1) * (diag_step + 1) < size, kInvalidArgument,
                      "op 'uniform_random': the last diagonal element (diag_num - 1) * (diag_step + 1) must lie in "
                      "Out, which has ",
                      size, " elements, but received diag_num ", diag_num, " and diag_step ", diag_step);
        // FillRandom draws element 0, 1, ... in order: every element draws
        // (the stream stays the one without a diagonal), and the diagonal
        // ones then give way to diag_val.
        return [lo, hi, diag_num, diag_step, diag_val, next = int64_t{0}](Rng& rng) mutable {
          const double v = rng.Uniform(lo, hi);
          const int64_t pos = next++;
          const bool on_diag = pos % (diag_step + 1) == 0 && pos / (diag_step + 1) < diag_num;
          return on_diag ? diag_val : v;
        };
      })
      .Input("ShapeTensor",
             "(Tensor<int32|int64>, optional) 1-D: Out's shape at run time; before ShapeTensorList and attribute "
             "shape",
             kTensorAttrInput)
      .Input("ShapeTensorList",
             "(Tensors<int32|int64>, optional) one single-element tensor per dim: Out's shape at run time; before "
             "attribute shape",
             kTensorAttrListInput)
      .Attr<float>("min", -1.0f, "(float, default -1.0) the lower bound (inclusive)")
      .Attr<float>("max", 1.0f, "(float, default 1.0) the upper bound (exclusive)")
      .Attr<int>("diag_num", 0, "(int, default 0) how many diagonal elements to set to diag_val (0: none)")
      .Attr<int>("diag_step", 0,
                 "(int, default 0) the diagonal's stride less one: element i * diag_step + i is the i-th; >= 0",
                 [](const int& step) {
                   NABLA_ENFORCE(step >= 0, kInvalidArgument, "attribute diag_step must be >= 0, but received ", step);
                 })
      .Attr<float>("diag_val", 1.0f, "(float, default 1.0) the value of the diagonal elements");
}

}  // namespace
}  // namespace nabla::math_ops
