// A well-formed plugin: one op with a CPU kernel.
#include "nabla/plugin.h"
#include "toy_op.h"

NABLA_REGISTER_OPS(toy_double) { toy::RegisterToyDouble(registrar, __FILE__, __LINE__); }

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
