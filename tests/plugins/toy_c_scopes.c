/* A C plugin probing C ABI version 6's control-flow functions:
 * toy_c_scope_probe (Out = a copy of X; an int attribute `n`) checks in its
 * kernel that every version 6 function refuses bad arguments with an error
 * instead of crashing, that scopes, kept scopes and vars of no scope behave,
 * and that the run's program is read only. The op is not registered as
 * control flow, so running a block is refused too. */
#include <stddef.h>
#include <string.h>

#include "nabla/c_api.h"

#define EXPECT_FAILS(api, failed, what)                                         \
  do {                                                                          \
    if (!(failed) || (api)->last_error(NULL)[0] == '\0') {                      \
      (api)->set_error(NABLA_C_RUNTIME, "toy_c_scopes: " what " did not fail"); \
      return NABLA_C_ERROR;                                                     \
    }                                                                           \
  } while (0)
#define EXPECT_TRUE(api, ok, what)                                       \
  do {                                                                   \
    if (!(ok)) {                                                         \
      (api)->set_error(NABLA_C_RUNTIME, "toy_c_scopes: expected " what); \
      return NABLA_C_ERROR;                                              \
    }                                                                    \
  } while (0)

static int32_t Infer(const nabla_api* api, void* user, nabla_infer_context* c) {
  int64_t dims[8];
  int64_t rank = api->infer_input_rank(c, "X", 0);
  (void)user;
  if (rank < 0 || rank > 8 || api->infer_input_dims(c, "X", 0, dims) != NABLA_C_OK) return NABLA_C_ERROR;
  if (api->infer_set_output_shape(c, "Out", 0, dims, (size_t)rank) != NABLA_C_OK) return NABLA_C_ERROR;
  return api->infer_set_output_dtype(c, "Out", 0, api->infer_input_dtype(c, "X", 0));
}

static int32_t Grad(const nabla_api* api, void* user, nabla_grad_context* g) {
  (void)user;
  EXPECT_FAILS(api, api->grad_block(NULL, 0) == -1, "grad_block(NULL)");
  EXPECT_FAILS(api, api->grad_block(g, 0) == -1, "grad_block of an op without a block");
  EXPECT_FAILS(api, api->grad_program(NULL) == NULL, "grad_program(NULL)");
  EXPECT_FAILS(api, api->grad_program(g) == NULL, "grad_program of an op without a block");
  return NABLA_C_OK;
}

static int32_t Kernel(const nabla_api* api, void* user, nabla_kernel_context* c) {
  const nabla_op* op = api->kernel_op(c);
  const char* x_name = api->op_arg(op, 0, "X", 0);
  nabla_scope* scope = api->kernel_scope(c);
  nabla_scope* child;
  nabla_pass_context* program;
  nabla_var* kept;
  nabla_var* loose;
  nabla_var_info info;
  int64_t value = 0;
  int32_t block = -1, line = -1, col = -1;
  (void)user;
  EXPECT_TRUE(api, op != NULL && x_name != NULL && scope != NULL, "the op, X's name and the kernel's scope");
  EXPECT_FAILS(api, api->kernel_scope(NULL) == NULL, "kernel_scope(NULL)");
  EXPECT_FAILS(api, api->scope_new_child(NULL) == NULL, "scope_new_child(NULL)");
  EXPECT_FAILS(api, api->scope_delete_child(NULL, scope) == NABLA_C_ERROR, "scope_delete_child(NULL)");
  EXPECT_FAILS(api, api->scope_find_var(NULL, x_name, 0) == NULL, "scope_find_var(NULL scope)");
  EXPECT_FAILS(api, api->scope_find_var(scope, NULL, 0) == NULL, "scope_find_var(NULL name)");
  EXPECT_FAILS(api, api->scope_var(scope, NULL) == NULL, "scope_var(NULL name)");
  EXPECT_FAILS(api, api->scope_var(scope, "") == NULL, "scope_var(\"\")");
  EXPECT_FAILS(api, api->kernel_run_block(c, 1, scope) == NABLA_C_ERROR, "kernel_run_block of an op not control flow");
  EXPECT_FAILS(api, api->kernel_run_block(NULL, 1, scope) == NABLA_C_ERROR, "kernel_run_block(NULL)");
  EXPECT_FAILS(api, api->kernel_run_option(c, "no_such_option", &value) == NABLA_C_ERROR, "an unknown run option");
  EXPECT_FAILS(api, api->kernel_run_option(c, "seed", NULL) == NABLA_C_ERROR, "kernel_run_option(NULL result)");
  EXPECT_FAILS(api, api->kernel_run_option(NULL, "seed", &value) == NABLA_C_ERROR, "kernel_run_option(NULL)");
  EXPECT_TRUE(api, api->kernel_run_option(c, "max_loop_iterations", &value) == NABLA_C_OK && value > 0,
              "a positive max_loop_iterations");
  EXPECT_FAILS(api, api->var_step_scope_count(NULL) == -1, "var_step_scope_count(NULL)");
  EXPECT_FAILS(api, api->var_step_scope(NULL, 0) == NULL, "var_step_scope(NULL)");
  EXPECT_FAILS(api, api->var_step_scope_push(NULL, scope) == NABLA_C_ERROR, "var_step_scope_push(NULL var)");
  EXPECT_FAILS(api, api->var_step_scopes_truncate(NULL, 0) == NABLA_C_ERROR, "var_step_scopes_truncate(NULL)");
  EXPECT_FAILS(api, api->op_get_block_attr(op, "n", &block) == NABLA_C_ERROR, "op_get_block_attr of an int");
  EXPECT_FAILS(api, api->op_get_block_attr(op, "no_such_attr", &block) == NABLA_C_ERROR, "op_get_block_attr of none");
  EXPECT_FAILS(api, api->op_get_block_attr(NULL, "n", &block) == NABLA_C_ERROR, "op_get_block_attr(NULL)");
  EXPECT_FAILS(api, api->op_pos(NULL, &line, &col) == NABLA_C_ERROR, "op_pos(NULL)");
  EXPECT_FAILS(api, api->op_pos(op, NULL, &col) == NABLA_C_ERROR, "op_pos(NULL line)");
  EXPECT_FAILS(api, api->pass_where(NULL, 1, 1) == NULL, "pass_where(NULL)");
  EXPECT_TRUE(api, api->op_pos(op, &line, &col) == NABLA_C_OK && line > 0, "the op's position in probe.yaml");

  /* The run's program: read, never written. */
  program = api->kernel_program(c);
  EXPECT_TRUE(api, program != NULL && api->pass_block_count(program) == 1, "the run's program of one block");
  EXPECT_TRUE(api, strstr(api->pass_where(program, line, col), "probe.yaml:") != NULL, "a position in probe.yaml");
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  EXPECT_TRUE(api, api->pass_var_get(program, 0, x_name, &info) == NABLA_C_OK, "X's var in the program");
  EXPECT_FAILS(api, api->pass_var_set(program, 0, "new_var", &info) == NABLA_C_ERROR, "pass_var_set read only");
  EXPECT_FAILS(api, api->pass_var_set_type(program, 0, x_name, NABLA_C_VAR_DENSE) == NABLA_C_ERROR,
               "pass_var_set_type read only");
  EXPECT_FAILS(api, api->pass_insert_op(program, 0, 0, "relu") == NABLA_C_ERROR, "pass_insert_op read only");
  EXPECT_FAILS(api, api->pass_remove_var(program, 0, x_name) == NABLA_C_ERROR, "pass_remove_var read only");

  /* A child scope: its own vars, the parent's through it, kept in a var. */
  child = api->scope_new_child(scope);
  EXPECT_TRUE(api, child != NULL && child != scope, "a child scope");
  EXPECT_TRUE(api, api->scope_find_var(child, x_name, 0) != NULL, "X found from the child");
  EXPECT_TRUE(api, api->scope_find_var(child, x_name, 1) == NULL, "X not local to the child");
  EXPECT_TRUE(api, api->scope_var(child, "t") != NULL && api->scope_find_var(scope, "t", 1) == NULL,
              "t local to the child");
  kept = api->scope_var(scope, "toy_c_scope_probe_kept");
  EXPECT_TRUE(api, kept != NULL && api->var_step_scope_count(kept) == 0, "a var keeping no scope");
  if (api->var_step_scope_push(kept, child) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api, api->var_step_scope_count(kept) == 1 && api->var_step_scope(kept, 0) == child, "one kept scope");
  EXPECT_FAILS(api, api->var_step_scope(kept, 1) == NULL, "var_step_scope past the end");
  EXPECT_FAILS(api, api->var_step_scope_push(kept, NULL) == NABLA_C_ERROR, "var_step_scope_push(NULL scope)");
  if (api->var_step_scopes_truncate(kept, 5) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api, api->var_step_scope_count(kept) == 1, "truncating to more leaves the list");
  if (api->var_step_scopes_truncate(kept, 0) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api, api->var_step_scope_count(kept) == 0, "no kept scope");
  /* Not a child of the child: left alone. */
  if (api->scope_delete_child(child, scope) != NABLA_C_OK) return NABLA_C_ERROR;
  if (api->scope_delete_child(scope, child) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_TRUE(api, api->scope_find_var(scope, x_name, 0) != NULL, "X after deleting the child");

  /* A var of no scope. */
  loose = api->var_new();
  EXPECT_TRUE(api, loose != NULL && api->var_type(loose) == NABLA_C_VAR_DENSE, "a dense var of no scope");
  if (api->tensor_copy(api->var_tensor(loose), api->var_tensor(api->kernel_var(c, 0, "X", 0)), api->kernel_device(c)) !=
      NABLA_C_OK)
    return NABLA_C_ERROR;
  if (api->tensor_copy(api->kernel_output(c, "Out", 0), api->var_tensor(loose), api->kernel_device(c)) != NABLA_C_OK)
    return NABLA_C_ERROR;
  api->var_free(loose);
  api->var_free(NULL);
  return NABLA_C_OK;
}

NABLA_C_PLUGIN(NABLA_PLUGIN_NAME, "0.9") {
  nabla_attr_value n;
  nabla_op_builder* b = api->op_new(registrar, "toy_c_scope_probe", __FILE__, __LINE__);
  memset(&n, 0, sizeof n);
  n.type = NABLA_C_ATTR_INT;
  n.i = 3;
  if (!b || api->op_doc(b, "Out = a copy of X; checks the version 6 control-flow functions.") != NABLA_C_OK ||
      api->op_input(b, "X", "(Tensor) input", 0) != NABLA_C_OK ||
      api->op_output(b, "Out", "(Tensor) output", 0) != NABLA_C_OK ||
      api->op_attr(b, "n", NABLA_C_ATTR_INT, &n, "(int) an attribute that is not a block", NULL, NULL) != NABLA_C_OK ||
      api->op_grad_maker(b, Grad, NULL) != NABLA_C_OK || api->op_infer_shape(b, Infer, NULL) != NABLA_C_OK)
    return NABLA_C_ERROR;
  if (api->op_attr(b, "bad", 9, NULL, "", NULL, NULL) == NABLA_C_OK) {
    api->set_error(NABLA_C_RUNTIME, "toy_c_scopes: op_attr took type 9");
    return NABLA_C_ERROR;
  }
  return api->kernel(registrar, "toy_c_scope_probe", NABLA_C_DEVICE_CPU, NABLA_C_FLOAT32, Kernel, NULL, __FILE__,
                     __LINE__);
}
