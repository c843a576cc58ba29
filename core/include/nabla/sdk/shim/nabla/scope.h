#pragma once
// nabla/scope.h for plugins on the C ABI (see plugin.h here): what a kernel
// sees of a var, ExecutionContext::InputVar's Variable, is in the SDK,
// nabla/sdk/plugin.h; scopes are the core's own.
#include "nabla/sdk/plugin.h"
