/* Device plugins written in C against the C ABI (TOY_C_DEVICE_VARIANT):
 *   1 toy_cdev: a device of host memory with a budget of 4096 bytes (an
 *     allocation past it fails) whose ops run their CPU kernels on host
 *     copies (NABLA_C_DEVICE_HOST_FALLBACK): every copy goes through the
 *     callbacks below;
 *   2 registers its backend (toy_cdev2) twice;
 *   3 leaves a callback NULL;
 *   4 registers the backend name toy_cdev again, under another plugin name
 *     (refused once toy_cdev is loaded);
 *   5 registers a backend, then ignores the error of a bad second one and
 *     returns OK: nothing of it may load. */
#include <stdlib.h>
#include <string.h>

#include "nabla/c_api.h"

enum { kBudget = 4096 };

typedef struct {
  size_t used;
} ToyDevice;

static int32_t Enumerate(const nabla_api* api, void* user, nabla_device_list* list) {
  const char* lines[] = {"toy C device: 4096 bytes of host memory", "written in C"};
  (void)user;
  return api->device_list_add(list, lines, 2, 1);
}

static void* Open(const nabla_api* api, void* user, int32_t index) {
  static ToyDevice device;
  (void)user;
  if (index != 0) {
    api->set_error(NABLA_C_NOT_FOUND, "toy_cdev has one device, toy_cdev:0");
    return NULL;
  }
  return &device;
}

static void* Allocate(const nabla_api* api, void* user, void* device, size_t bytes) {
  ToyDevice* d = (ToyDevice*)device;
  void* p;
  (void)user;
  /* Not thread-safe; the test runs one thread. */
  if (d->used + bytes > kBudget) {
    api->set_error(NABLA_C_EXTERNAL, "toy_cdev has 4096 bytes of memory");
    return NULL;
  }
  p = malloc(bytes);
  if (p) d->used += bytes;
  return p;
}

static void Deallocate(const nabla_api* api, void* user, void* device, void* ptr, size_t bytes) {
  (void)api;
  (void)user;
  ((ToyDevice*)device)->used -= bytes;
  free(ptr);
}

static int32_t Copy(const nabla_api* api, void* user, void* device, void* dst, const void* src, size_t bytes) {
  (void)api;
  (void)user;
  (void)device;
  memmove(dst, src, bytes);
  return NABLA_C_OK;
}

static int32_t Synchronize(const nabla_api* api, void* user, void* device) {
  (void)api;
  (void)user;
  (void)device;
  return NABLA_C_OK;
}

static nabla_device_backend Backend(const char* name) {
  nabla_device_backend b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  b.flags = NABLA_C_DEVICE_HOST_FALLBACK;
  b.name = name;
  b.none_found = "no toy device";
  b.enumerate = Enumerate;
  b.open = Open;
  b.allocate = Allocate;
  b.deallocate = Deallocate;
  b.copy_from_host = Copy;
  b.copy_to_host = Copy;
  b.copy_on_device = Copy;
  b.synchronize = Synchronize;
  return b;
}

NABLA_C_PLUGIN(NABLA_PLUGIN_NAME, "1.0") {
  nabla_device_backend b = Backend("toy_cdev");
#if TOY_C_DEVICE_VARIANT == 1 || TOY_C_DEVICE_VARIANT == 4
  return api->device_backend(registrar, &b) < 0 ? NABLA_C_ERROR : NABLA_C_OK;
#elif TOY_C_DEVICE_VARIANT == 2
  b.name = "toy_cdev2";
  if (api->device_backend(registrar, &b) < 0) return NABLA_C_ERROR;
  return api->device_backend(registrar, &b) < 0 ? NABLA_C_ERROR : NABLA_C_OK;
#elif TOY_C_DEVICE_VARIANT == 3
  b.name = "toy_cdev_null";
  b.copy_to_host = NULL;
  return api->device_backend(registrar, &b) < 0 ? NABLA_C_ERROR : NABLA_C_OK;
#else
  b.name = "toy_cdev_ignored";
  if (api->device_backend(registrar, &b) < 0) return NABLA_C_ERROR;
  b.name = "toy-cdev";
  (void)api->device_backend(registrar, &b);
  return NABLA_C_OK;
#endif
}
