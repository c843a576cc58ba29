#pragma once
// nabla/cpu/vmath.h for plugins on the C ABI (see ../plugin.h): the CPU
// backend's row kernels (RowMax, ExpShiftedSum, LayerNormRow, ...), which
// nabla/sdk/cpu.h wraps under the same names (C ABI version 4).
#include "nabla/sdk/cpu.h"
