// Registers toy_double, which toy_good owns, under another plugin name, plus
// an op of its own that must not leak into the registry when the batch fails.
#include "nabla/plugin.h"
#include "toy_op.h"

NABLA_REGISTER_OPS(toy_duplicate) {
  registrar.Op("toy_duplicate_only", __FILE__, __LINE__).Input("X", "(Tensor) input").Output("Out", "(Tensor) output");
  toy::RegisterToyDouble(registrar, __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
