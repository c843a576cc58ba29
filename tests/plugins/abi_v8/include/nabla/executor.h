#pragma once
// nabla/executor.h for plugins on the C ABI (see plugin.h here): what a
// control-flow kernel reads of its run, ExecutorOptions and RunContext (C
// ABI version 6), is in the SDK, nabla/sdk/plugin.h; executors are the
// core's own.
#include "nabla/sdk/plugin.h"
