#pragma once
// nabla/opkit/opkit.h for plugins on the C ABI (see ../plugin.h): the op
// kit's header-only part, nabla/sdk/opkit.h.
#include "nabla/sdk/opkit.h"
