// Prepended to every plugin .cl by nabla_add_opencl_kernels(): T is the
// element type (-DT=float, or -DT=double -DNABLA_FP64), GID the work item's
// index as a long.
#ifdef NABLA_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define GID ((long)get_global_id(0))
