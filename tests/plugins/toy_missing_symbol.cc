// Calls a core function that does not exist, as a plugin built against
// another nabla would. Linked without --no-undefined so the build lets it
// through; the dynamic loader must refuse it.
#include "nabla/plugin.h"

namespace nabla {
NABLA_API void FunctionThatThisCoreDoesNotHave(Registrar& registrar);
}  // namespace nabla

NABLA_REGISTER_OPS(toy_missing) { nabla::FunctionThatThisCoreDoesNotHave(registrar); }

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
