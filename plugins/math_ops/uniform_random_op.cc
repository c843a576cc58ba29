// uniform_random: a tensor of uniform random values in [min, max).
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

NABLA_REGISTER_OPS(uniform_random) {
  RegisterRandomOp(registrar, "uniform_random", "Out = values drawn uniformly from [min, max).", __FILE__, __LINE__,
                   [](const ExecutionContext& ctx) {
                     double lo = ctx.Attr<float>("min"), hi = ctx.Attr<float>("max");
                     NABLA_ENFORCE(lo <= hi, kInvalidArgument,
                                   "op 'uniform_random': expected min <= max, but received min ", lo, " and max ", hi);
                     return [lo, hi](Rng& rng) { return rng.Uniform(lo, hi); };
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
      .Attr<float>("max", 1.0f, "(float, default 1.0) the upper bound (exclusive)");
}

}  // namespace
}  // namespace nabla::math_ops
