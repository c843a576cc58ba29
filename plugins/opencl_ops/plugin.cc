// The OpenCL kernels of the standard ops. Its name sorts after math_ops and
// nn_ops, whose ops it adds kernels to (see OpExists in ocl_util.h).
#include "nabla/plugin.h"

NABLA_PLUGIN("opencl_ops");
