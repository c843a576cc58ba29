// Registers an op whose type is no identifier: the whole plugin is refused.
#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_bad_op_name) {
  registrar.Op("Cube-Op", __FILE__, __LINE__).Input("X", "(Tensor) input").Output("Out", "(Tensor) output");
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
