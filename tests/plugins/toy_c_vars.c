/* A C plugin probing C ABI version 5's variables, tensor arrays and
 * var-type inference: toy_c_var_probe (Out = a copy of X) checks, in its
 * var-type inference, shape inference and kernel, that every version 5
 * function refuses bad arguments with an error instead of crashing, and
 * that a tensor array's entries, var types and tensor_assign behave. */
#include <stddef.h>
#include <string.h>

#include "nabla/c_api.h"

#define EXPECT_FAILS(api, failed, what)                                       \
  do {                                                                        \
    if (!(failed) || (api)->last_error(NULL)[0] == '\0') {                    \
      (api)->set_error(NABLA_C_RUNTIME, "toy_c_vars: " what " did not fail"); \
      return NABLA_C_ERROR;                                                   \
    }                                                                         \
  } while (0)
#define EXPECT_TRUE(api, ok, what)                                     \
  do {                                                                 \
    if (!(ok)) {                                                       \
      (api)->set_error(NABLA_C_RUNTIME, "toy_c_vars: expected " what); \
      return NABLA_C_ERROR;                                            \
    }                                                                  \
  } while (0)

static int32_t InferVarType(const nabla_api* api, void* user, const nabla_op* op, nabla_pass_context* ctx,
                            size_t block) {
  const char* out = api->op_arg(op, 1, "Out", 0);
  (void)user;
  EXPECT_TRUE(api, out != NULL, "an Out argument");
  EXPECT_FAILS(api, api->pass_var_type(NULL, block, out) == -1, "pass_var_type(NULL context)");
  EXPECT_FAILS(api, api->pass_var_type(ctx, 99, out) == -1, "pass_var_type of block 99");
  EXPECT_FAILS(api, api->pass_var_type(ctx, block, NULL) == -1, "pass_var_type(NULL name)");
  EXPECT_FAILS(api, api->pass_var_type(ctx, block, "no_such_var") == -1, "pass_var_type of no var");
  EXPECT_FAILS(api, api->pass_var_set_type(ctx, block, out, 9) == NABLA_C_ERROR, "pass_var_set_type(9)");
  EXPECT_FAILS(api, api->pass_var_set_type(ctx, block, "no_such_var", NABLA_C_VAR_DENSE) == NABLA_C_ERROR,
               "pass_var_set_type of no var");
  /* Ops and the var list stay as they are. */
  EXPECT_FAILS(api, api->pass_insert_op(ctx, block, 0, "relu") == NABLA_C_ERROR, "pass_insert_op in inference");
  EXPECT_FAILS(api, api->pass_remove_ops(ctx, block, 0, 1) == NABLA_C_ERROR, "pass_remove_ops in inference");
  EXPECT_FAILS(api, api->pass_op_set_pos(ctx, block, 0, 1, 1) == NABLA_C_ERROR, "pass_op_set_pos in inference");
  EXPECT_FAILS(api, api->pass_remove_var(ctx, block, out) == NABLA_C_ERROR, "pass_remove_var in inference");
  /* A round trip through tensor_array, back to dense. */
  if (api->pass_var_set_type(ctx, block, out, NABLA_C_VAR_TENSOR_ARRAY) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api, api->pass_var_type(ctx, block, out) == NABLA_C_VAR_TENSOR_ARRAY, "Out to be a tensor_array");
  return api->pass_var_set_type(ctx, block, out, NABLA_C_VAR_DENSE);
}

static int32_t Infer(const nabla_api* api, void* user, nabla_infer_context* c) {
  int64_t dims[8];
  int64_t rank = api->infer_input_rank(c, "X", 0);
  (void)user;
  EXPECT_FAILS(api, api->infer_input_var_type(NULL, "X", 0) == -1, "infer_input_var_type(NULL)");
  EXPECT_FAILS(api, api->infer_input_var_type(c, "NoSlot", 0) == -1, "infer_input_var_type of no slot");
  EXPECT_TRUE(api, api->infer_input_var_type(c, "X", 0) == NABLA_C_VAR_DENSE, "a dense X");
  if (rank < 0 || rank > 8 || api->infer_input_dims(c, "X", 0, dims) != NABLA_C_OK) return NABLA_C_ERROR;
  if (api->infer_set_output_shape(c, "Out", 0, dims, (size_t)rank) != NABLA_C_OK) return NABLA_C_ERROR;
  return api->infer_set_output_dtype(c, "Out", 0, api->infer_input_dtype(c, "X", 0));
}

static int32_t Kernel(const nabla_api* api, void* user, nabla_kernel_context* c) {
  nabla_var* x = api->kernel_var(c, 0, "X", 0);
  nabla_var* out = api->kernel_var(c, 1, "Out", 0);
  nabla_tensor* entry;
  (void)user;
  EXPECT_TRUE(api, x != NULL && out != NULL, "the vars of X and Out");
  EXPECT_FAILS(api, api->kernel_var(NULL, 0, "X", 0) == NULL, "kernel_var(NULL context)");
  EXPECT_FAILS(api, api->kernel_var(c, 2, "X", 0) == NULL, "kernel_var(output 2)");
  EXPECT_FAILS(api, api->kernel_var(c, 0, "NoSlot", 0) == NULL, "kernel_var of no slot");
  EXPECT_FAILS(api, api->kernel_var(c, 1, "Out", 1) == NULL, "kernel_var past the slot's end");
  EXPECT_FAILS(api, api->var_type(NULL) == -1, "var_type(NULL)");
  EXPECT_FAILS(api, api->var_set_type(NULL, NABLA_C_VAR_DENSE) == NABLA_C_ERROR, "var_set_type(NULL)");
  EXPECT_FAILS(api, api->var_set_type(out, 3) == NABLA_C_ERROR, "var_set_type(3)");
  EXPECT_FAILS(api, api->var_set_type(out, -1) == NABLA_C_ERROR, "var_set_type(-1)");
  EXPECT_FAILS(api, api->var_tensor(NULL) == NULL, "var_tensor(NULL)");
  EXPECT_FAILS(api, api->var_array_size(x) == -1, "var_array_size of a dense var");
  EXPECT_FAILS(api, api->var_array_size(NULL) == -1, "var_array_size(NULL)");
  EXPECT_FAILS(api, api->var_array_entry(x, 0) == NULL, "var_array_entry of a dense var");
  EXPECT_FAILS(api, api->var_array_resize(x, 1) == NABLA_C_ERROR, "var_array_resize of a dense var");
  EXPECT_FAILS(api, api->tensor_initialized(NULL) == -1, "tensor_initialized(NULL)");
  EXPECT_FAILS(api, api->tensor_assign(NULL, NULL) == NABLA_C_ERROR, "tensor_assign(NULL)");
  EXPECT_TRUE(api, api->var_type(x) == NABLA_C_VAR_DENSE, "a dense X");
  EXPECT_TRUE(api, api->tensor_initialized(api->var_tensor(x)) == 1, "X to hold data");
  /* Out as a tensor array: two empty entries, entry 0 sharing X, then
   * emptied again; past the end and too many entries are refused. */
  if (api->var_set_type(out, NABLA_C_VAR_TENSOR_ARRAY) != NABLA_C_OK) return NABLA_C_ERROR;
  if (api->var_array_resize(out, 2) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api, api->var_array_size(out) == 2, "an array of 2");
  EXPECT_FAILS(api, api->var_array_entry(out, 2) == NULL, "var_array_entry past the end");
  EXPECT_FAILS(api, api->var_array_resize(out, (size_t)1 << 40) == NABLA_C_ERROR, "var_array_resize(2^40)");
  entry = api->var_array_entry(out, 0);
  EXPECT_TRUE(api, entry != NULL && api->tensor_initialized(entry) == 0, "an empty entry");
  if (api->tensor_assign(entry, api->var_tensor(x)) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api,
              api->tensor_initialized(entry) == 1 && api->tensor_numel(entry) == api->tensor_numel(api->var_tensor(x)),
              "entry 0 to share X");
  if (api->tensor_assign(entry, NULL) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api, api->tensor_initialized(entry) == 0, "entry 0 emptied");
  if (api->var_array_resize(out, 0) != NABLA_C_OK) return NABLA_C_ERROR;
  /* Back to dense: Out = a copy of X. */
  if (api->var_set_type(out, NABLA_C_VAR_DENSE) != NABLA_C_OK) return NABLA_C_ERROR;
  return api->tensor_copy(api->var_tensor(out), api->var_tensor(x), api->kernel_device(c));
}

NABLA_C_PLUGIN(NABLA_PLUGIN_NAME, "0.9") {
  nabla_op_builder* b = api->op_new(registrar, "toy_c_var_probe", __FILE__, __LINE__);
  if (!b || api->op_doc(b, "Out = a copy of X; checks the version 5 var functions.") != NABLA_C_OK ||
      api->op_input(b, "X", "(Tensor) input", 0) != NABLA_C_OK ||
      api->op_output(b, "Out", "(Tensor) output", 0) != NABLA_C_OK || api->op_grad_maker_none(b) != NABLA_C_OK ||
      api->op_infer_shape(b, Infer, NULL) != NABLA_C_OK)
    return NABLA_C_ERROR;
  if (api->op_infer_var_type(b, NULL, NULL) == NABLA_C_OK) {
    api->set_error(NABLA_C_RUNTIME, "toy_c_vars: op_infer_var_type took no function");
    return NABLA_C_ERROR;
  }
  if (api->op_infer_var_type(b, InferVarType, NULL) != NABLA_C_OK) return NABLA_C_ERROR;
  return api->kernel(registrar, "toy_c_var_probe", NABLA_C_DEVICE_CPU, NABLA_C_FLOAT32, Kernel, NULL, __FILE__,
                     __LINE__);
}
