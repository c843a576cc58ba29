#include "nabla/plugin.h"

NABLA_PLUGIN("math_ops");
