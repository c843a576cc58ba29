#pragma once
// nabla/cpu/cpu.h for plugins on the C ABI (see ../plugin.h): the parallel
// loop over the core's threads, nabla/sdk/cpu.h.
#include "nabla/sdk/cpu.h"
