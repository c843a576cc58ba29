/* C ABI plugins that must be refused, one way each (TOY_C_VARIANT):
 *   1 built for a newer C API version than the core's;
 *   2 needing a longer function table than the core's;
 *   3 a manifest but no entry point;
 *   4 registering an op, then failing: nothing of it may stay. */
#include <stddef.h>

#include "nabla/c_api.h"

#if TOY_C_VARIANT == 1 || TOY_C_VARIANT == 2 || TOY_C_VARIANT == 3
#if TOY_C_VARIANT == 1
#define TOY_VERSION (NABLA_C_API_VERSION + 1)
#define TOY_SIZE ((uint32_t)sizeof(nabla_api))
#elif TOY_C_VARIANT == 2
#define TOY_VERSION NABLA_C_API_VERSION
#define TOY_SIZE ((uint32_t)sizeof(nabla_api) + 8u)
#else
#define TOY_VERSION NABLA_C_API_VERSION
#define TOY_SIZE ((uint32_t)sizeof(nabla_api))
#endif
NABLA_C_EXPORT const nabla_plugin_manifest nabla_plugin_manifest_v1 = {NABLA_C_PLUGIN_MAGIC, TOY_VERSION, TOY_SIZE,
                                                                       0, NABLA_PLUGIN_NAME, "0.9"};
#if TOY_C_VARIANT != 3
NABLA_C_EXPORT int32_t nabla_plugin_init(const nabla_api* api, nabla_registrar* registrar) {
  (void)api;
  (void)registrar;
  return NABLA_C_OK;
}
#endif
#else
NABLA_C_PLUGIN(NABLA_PLUGIN_NAME, "0.9") {
  nabla_op_builder* b = api->op_new(registrar, "toy_c_half", __FILE__, __LINE__);
  if (!b || api->op_input(b, "X", "(Tensor) input", 0) != NABLA_C_OK) return NABLA_C_ERROR;
  api->set_error(NABLA_C_INVALID_ARGUMENT, "toy_c_half gives up after its first op");
  return NABLA_C_ERROR;
}
#endif
