// std_sdk_cf: the control_flow plugin's op files that build over the C ABI,
// as they are in plugins/control_flow (see tests/plugins/CMakeLists.txt);
// std_sdk_test checks it against the standard build. Its identity only:
// every op file registers its own ops.
#include "nabla/plugin.h"

NABLA_PLUGIN("std_sdk_cf");
