// Carries a valid ABI tag (so it gets opened) but no entry point.
#include "nabla/plugin.h"

extern "C" NABLA_API const char NABLA_ABI_SYMBOL[] = NABLA_PLUGIN_NAME;
