// Built with NABLA_PLUGIN_ABI_VERSION=999. Its static initialiser aborts the
// process: the loader must reject the tag without running any of its code.
#include <cstdio>
#include <cstdlib>

#include "nabla/plugin.h"

namespace {
struct AbortOnLoad {
  AbortOnLoad() {
    std::fputs("toy_abi_mismatch: static initialiser ran; the loader opened a plugin with a wrong ABI tag\n", stderr);
    std::abort();
  }
} abort_on_load;
}  // namespace

NABLA_REGISTER_OPS(toy_abi) { registrar.Op("toy_abi_op", __FILE__, __LINE__); }

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
