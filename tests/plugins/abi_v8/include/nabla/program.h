#pragma once
// nabla/program.h for plugins on the C ABI (see plugin.h here): the SDK's
// ProgramDesc, BlockDesc, OpDesc and VarDesc, which a program pass edits
// (nabla/sdk/plugin.h).
#include "nabla/sdk/plugin.h"
