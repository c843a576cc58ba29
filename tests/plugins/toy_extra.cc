// A well-formed plugin with its own op, found through NABLA_PLUGIN_PATH.
#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_extra) {
  registrar.Op("toy_extra_identity", __FILE__, __LINE__)
      .Doc("Out = X (a test op)")
      .Input("X", "(Tensor) input")
      .Output("Out", "(Tensor) output");
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
