/* OpenCL kernels for plugins on nabla's C ABI (nabla/c_api.h): the OpenCL
 * device plugin's own function table, in C.
 *
 * A plugin built against nabla's C ABI links nothing of nabla, so it cannot
 * call the OpenCL backend's C++ classes (nabla/opencl/opencl.h). The backend
 * (libnabla_opencl.so, a device plugin the core loads when a program asks for
 * an `opencl` device) exports this table instead, under
 * NABLA_OPENCL_API_SYMBOL. A kernel registered for NABLA_C_DEVICE_OPENCL runs
 * only on an OpenCL device, which exists only once the core has loaded the
 * backend, so nabla_opencl_get_api() finds the table in the loaded library
 * (dlopen with RTLD_NOLOAD: it never loads anything itself).
 *
 * The rules are nabla/c_api.h's: the table only grows (new functions are
 * appended, NABLA_OPENCL_API_VERSION goes up), and a function that fails
 * returns NABLA_C_ERROR after api->set_error, so the kernel can return
 * NABLA_C_ERROR at once. C++ plugins on the SDK use nabla/opencl/sdk_kernel.h
 * over it.
 */
#ifndef NABLA_OPENCL_OPENCL_C_H_
#define NABLA_OPENCL_OPENCL_C_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include "nabla/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NABLA_OPENCL_API_VERSION 2
/* The symbol keeps its name: version 2 only appended functions. */
#define NABLA_OPENCL_API_SYMBOL "nabla_opencl_api_v1"
/* The backend's soname, by which the loaded library is found. */
#define NABLA_OPENCL_LIBRARY "libnabla_opencl.so"

enum nabla_opencl_arg_kind {
  NABLA_OPENCL_ARG_TENSOR = 0, /* a __global buffer: the tensor's data */
  NABLA_OPENCL_ARG_VALUE = 1,  /* `size` bytes at `value` (at most 64): int, long, float, double, long8 ... */
  NABLA_OPENCL_ARG_LOCAL = 2,  /* a __local array of `size` bytes */
  /* Version 2: a __global buffer by handle: `value` IS the buffer (what
   * api->tensor_data returns for a tensor on the kernel's device, or
   * buffer_allocate / stage_tensor), checked to be a live buffer of the
   * kernel's device; NULL (an empty tensor's data) is OpenCL's null buffer. */
  NABLA_OPENCL_ARG_BUFFER = 3
};

/* One kernel argument. A TENSOR argument held on another device than the
 * kernel's (a feed still on the host) is uploaded for this launch; an output
 * is allocated first with api->tensor_allocate on the kernel's device. */
typedef struct nabla_opencl_arg {
  int32_t kind;
  uint32_t size;
  const nabla_tensor* tensor;
  const void* value;
} nabla_opencl_arg;

typedef struct nabla_opencl_api {
  uint32_t api_version; /* NABLA_OPENCL_API_VERSION of the backend */
  uint32_t struct_size; /* sizeof(nabla_opencl_api) of the backend */

  /* 1 when `device` (api->kernel_device) runs float64 kernels (cl_khr_fp64),
   * 0 when it does not, -1 when it is not an OpenCL device. */
  int32_t (*device_fp64)(const nabla_api* api, nabla_device* device);
  /* Builds the program of `source` (`source_size` bytes) with build
   * `options` (once per process, device, source and options; a failed build
   * is an error carrying the build log) and enqueues kernel `kernel` over
   * `global` work items in groups of `local` (0: 64; global is rounded up to
   * whole groups, so kernels guard their index). Nothing for global 0. The
   * device's queue is in order: later kernels and copies see the results. */
  int32_t (*launch)(const nabla_api* api, nabla_device* device, const char* source, size_t source_size,
                    const char* options, const char* kernel, const nabla_opencl_arg* args, size_t arg_count,
                    size_t global, size_t local);

  /* Version 2: device buffers, copies and GEMM (what nabla/opencl/kernel.h's
   * OpenClDevice offers plugins on the C++ ABI). A buffer is a handle, never
   * dereferenced on the host: the data of a tensor on `device`, or one of
   * buffer_allocate. Each function checks that its buffers are live buffers
   * of `device` and that every byte range it touches lies inside them, and
   * fails (set_error, NABLA_C_ERROR) otherwise. Copies and fills are enqueued
   * on the device's in-order queue like launches; copy_from_host and
   * copy_to_host block until the host memory is free or filled. Offsets and
   * sizes count bytes except in gemm. */
  /* A device temporary of at least `bytes` (> 0) bytes from the device's
   * pool; NULL after set_error on failure. Give it back with buffer_free. */
  void* (*buffer_allocate)(const nabla_api* api, nabla_device* device, size_t bytes);
  /* Returns a buffer of buffer_allocate or stage_tensor to the pool
   * (commands already enqueued still see its contents). */
  int32_t (*buffer_free)(const nabla_api* api, nabla_device* device, void* buffer);
  /* Tensor `t` as a buffer on `device`: its own data when it lives there
   * (*owned = 0), else a new buffer holding a copy of its data (*owned = 1,
   * give it back with buffer_free). An empty tensor gives NULL, *owned = 0. */
  int32_t (*stage_tensor)(const nabla_api* api, nabla_device* device, const nabla_tensor* t, void** buffer,
                          int32_t* owned);
  /* Sets `bytes` of `dst` from `offset` to repetitions of `pattern`
   * (`pattern_bytes` of 1, 2, 4, ... 128; bytes a multiple of it). */
  int32_t (*fill)(const nabla_api* api, nabla_device* device, void* dst, size_t offset, size_t bytes,
                  const void* pattern, size_t pattern_bytes);
  int32_t (*copy_region)(const nabla_api* api, nabla_device* device, void* dst, size_t dst_offset, const void* src,
                         size_t src_offset, size_t bytes);
  int32_t (*copy_from_host)(const nabla_api* api, nabla_device* device, void* dst, size_t dst_offset, const void* src,
                            size_t bytes);
  int32_t (*copy_to_host)(const nabla_api* api, nabla_device* device, void* dst, const void* src, size_t src_offset,
                          size_t bytes);
  /* Row-major C = alpha * op(A) op(B) + beta * C through CLBlast, op(A)
   * m x k, op(B) k x n; a, b, c are buffers and the offsets and leading
   * dimensions count elements of dtype (NABLA_C_FLOAT32, alpha and beta
   * rounded to float, or NABLA_C_FLOAT64). m, n or k may be 0 (k = 0:
   * C = beta * C). */
  int32_t (*gemm)(const nabla_api* api, nabla_device* device, int32_t dtype, int32_t trans_a, int32_t trans_b,
                  int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t a_offset, int64_t lda,
                  const void* b, int64_t b_offset, int64_t ldb, double beta, void* c, int64_t c_offset, int64_t ldc);
  /* Append new functions here, and raise NABLA_OPENCL_API_VERSION. */
} nabla_opencl_api;

/* The loaded backend's table, or NULL after api->set_error when the backend
 * is not loaded (no OpenCL device was ever opened) or is older than this
 * header. Cached after the first success. */
static inline const nabla_opencl_api* nabla_opencl_get_api(const nabla_api* api) {
  /* Atomic: kernels may run on several threads at once. */
  static const nabla_opencl_api* table = NULL;
  const nabla_opencl_api* cached = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
  if (cached) return cached;
  void* library = dlopen(NABLA_OPENCL_LIBRARY, RTLD_LAZY | RTLD_NOLOAD);
  const nabla_opencl_api* found = NULL;
  if (library) found = (const nabla_opencl_api*)dlsym(library, NABLA_OPENCL_API_SYMBOL);
  if (!found) {
    api->set_error(NABLA_C_PRECONDITION_NOT_MET,
                   "an OpenCL kernel ran but the OpenCL device plugin (" NABLA_OPENCL_LIBRARY
                   ") is not loaded or exports no " NABLA_OPENCL_API_SYMBOL);
    return NULL;
  }
  if (found->struct_size < sizeof(nabla_opencl_api)) {
    api->set_error(NABLA_C_PRECONDITION_NOT_MET,
                   "the loaded OpenCL device plugin (" NABLA_OPENCL_LIBRARY
                   ") is older than this plugin's nabla/opencl/opencl_c.h: its table is too short; use a newer nabla");
    return NULL;
  }
  __atomic_store_n(&table, found, __ATOMIC_RELEASE);
  return found;
}

#ifdef __cplusplus
}
#endif

#endif /* NABLA_OPENCL_OPENCL_C_H_ */
