// std_sdk_ops: the standard plugins' unary and activation op files, as they
// are in plugins/math_ops and plugins/nn_ops, built over the C ABI (see
// tests/plugins/CMakeLists.txt); std_sdk_test checks it against the
// standard build. Its identity only: every op file registers its own ops.
#include "nabla/plugin.h"

NABLA_PLUGIN("std_sdk_ops");
