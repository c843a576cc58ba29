#pragma once
// nabla/scope.h for plugins on the C ABI (see plugin.h here): a kernel's
// vars (Variable) and, since C ABI version 6, the scopes a control-flow
// kernel runs blocks in (Scope) are in the SDK, nabla/sdk/plugin.h.
#include "nabla/sdk/plugin.h"
