// The plugin's identity: exactly one file says NABLA_PLUGIN. The name comes
// from nabla_add_plugin(acme ...) as NABLA_PLUGIN_NAME.
#include "nabla/plugin.h"

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
