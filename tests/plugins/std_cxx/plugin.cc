// std_cxx_ops: the op files of plugins/math_ops and plugins/nn_ops, as they
// are, built over the C++ ABI (see tests/plugins/CMakeLists.txt): the
// reference std_sdk_test compares the shipped C ABI plugins with. Its
// identity only: every op file registers its own ops.
#include "nabla/plugin.h"

NABLA_PLUGIN("std_cxx_ops");
