// Its second registration block throws after the first one staged an op.
#include <stdexcept>

#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_throwing_staged) {
  registrar.Op("toy_throwing_staged", __FILE__, __LINE__).Input("X", "(Tensor) input").Output("Out", "(Tensor) output");
}

NABLA_REGISTER_OPS(toy_throwing_fails) { throw std::runtime_error("toy registration exploded on purpose"); }

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
