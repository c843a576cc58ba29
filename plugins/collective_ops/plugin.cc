// The plugin's identity; every *_op.cc file registers its own ops.
#include "nabla/plugin.h"

NABLA_PLUGIN("collective_ops");
