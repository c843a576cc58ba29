// A well-formed plugin that the build strips (no .symtab left): its ABI tag
// must still be found, in .dynsym.
#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_stripped) {
  registrar.Op("toy_stripped_identity", __FILE__, __LINE__)
      .Doc("Out = X (a test op)")
      .Input("X", "(Tensor) input")
      .Output("Out", "(Tensor) output");
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
