#pragma once
// nabla/plugin.h for plugins on the C ABI: nabla_add_plugin(... ABI C) puts
// <include>/nabla/sdk/shim before <include>, so a plugin's
// #include "nabla/plugin.h" gets the header-only SDK over nabla/c_api.h
// instead of the core's C++ classes, with the same names.
#include "nabla/sdk/plugin.h"
