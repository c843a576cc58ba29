#pragma once
// nabla/program.h for plugins on the C ABI (see plugin.h here): the SDK's
// classes of the same names (OpDesc, VarDesc, BlockDesc), nabla/sdk/plugin.h.
#include "nabla/sdk/plugin.h"
