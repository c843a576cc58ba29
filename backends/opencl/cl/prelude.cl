// Prepended to every plugin .cl by nabla_add_opencl_kernels(): T is the
// element type (-DT=float, or -DT=double -DNABLA_FP64), GID the work item's
// index as a long, nabla_kahan_add a compensated sum.
#ifdef NABLA_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define GID ((long)get_global_id(0))

// *acc += v, compensated (Kahan): *comp (start it at 0) carries what each
// addition lost, so a long float sum lands near the double-accumulated one
// the CPU kernels compute instead of drifting by about count * 2^-24. Past
// an infinity there is no correction (inf - inf would make it NaN).
void nabla_kahan_add(T* acc, T* comp, T v) {
  const T y = v - *comp, t = *acc + y;
  *comp = isfinite(t) ? (t - *acc) - y : (T)0;
  *acc = t;
}
