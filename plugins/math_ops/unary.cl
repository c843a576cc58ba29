// OpenCL C of the unary math ops (unary_opencl.cc). Their rows call OpenCL
// builtins only; this file brings the prelude (T, fp64, GID), and
// nabla/opencl/unary.h appends the kernel skeletons and each row's functions
// and kernels.
