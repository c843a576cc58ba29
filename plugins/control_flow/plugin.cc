#include "nabla/plugin.h"

NABLA_PLUGIN("control_flow");
