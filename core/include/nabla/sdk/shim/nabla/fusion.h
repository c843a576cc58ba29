#pragma once
// nabla/fusion.h for plugins on the C ABI (see plugin.h here): what a program
// pass calls of it (EvaluateOnHost); FuseOps and FuseGradOps run in the core.
#include "nabla/sdk/plugin.h"
