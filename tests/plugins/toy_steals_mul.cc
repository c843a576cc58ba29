// Registers `mul`, which the standard math_ops plugin owns, plus an op of its
// own that must not leak into the registry when the batch is refused.
#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_steals_mul) {
  registrar.Op("toy_steals_mul_only", __FILE__, __LINE__).Input("X", "(Tensor) input").Output("Out", "(Tensor) output");
  registrar.Op("mul", __FILE__, __LINE__)
      .Input("X", "(Tensor) input")
      .Input("Y", "(Tensor) input")
      .Output("Out", "(Tensor) output");
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
