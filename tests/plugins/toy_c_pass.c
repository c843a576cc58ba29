/* A C plugin with a program pass (C ABI version 4): toy_c_pass_probe's
 * before-backward rewrite leaves the program as it is and checks that every
 * pass_* function refuses bad arguments with an error instead of crashing;
 * with "probe_fails" kept it fails itself, passing on the core's error. */
#include <stddef.h>
#include <string.h>

#include "nabla/c_api.h"

#define EXPECT_FAILS(api, failed, what)                                          \
  do {                                                                           \
    if (!(failed) || (api)->last_error(NULL)[0] == '\0') {                       \
      (api)->set_error(NABLA_C_RUNTIME, "toy_c_pass: " what " did not fail");    \
      return NABLA_C_ERROR;                                                      \
    }                                                                            \
  } while (0)

/* pass_evaluate_on_host: fill_constant then relu, put at the block's end
 * for the probe and removed again, give their values; ops reading a feed,
 * and bad arguments, are refused. */
static int32_t EvaluateProbe(const nabla_api* api, nabla_pass_context* ctx, size_t ops) {
  static const int32_t shape[2] = {2, 2};
  static const char* const fill_out[1] = {"probe_c"};
  static const char* const relu_out[1] = {"probe_r"};
  const size_t both[2] = {ops, ops + 1}, first[1] = {0}, twice[2] = {ops, ops}, past[1] = {ops + 2};
  nabla_attr_value v;
  const nabla_tensor* t;
  const float* data;
  memset(&v, 0, sizeof v);
  if (api->pass_insert_op(ctx, 0, ops, "fill_constant") != NABLA_C_OK ||
      api->pass_op_set_args(ctx, 0, ops, 1, "Out", fill_out, 1) != NABLA_C_OK)
    return NABLA_C_ERROR;
  v.type = NABLA_C_ATTR_INTS;
  v.list = shape;
  v.count = 2;
  if (api->pass_op_set_attr(ctx, 0, ops, "shape", &v) != NABLA_C_OK) return NABLA_C_ERROR;
  v.type = NABLA_C_ATTR_FLOAT;
  v.f = -1.5;
  if (api->pass_op_set_attr(ctx, 0, ops, "value", &v) != NABLA_C_OK ||
      api->pass_op_fill_default_attrs(ctx, 0, ops) != NABLA_C_OK ||
      api->pass_insert_op(ctx, 0, ops + 1, "relu") != NABLA_C_OK ||
      api->pass_op_set_args(ctx, 0, ops + 1, 0, "X", fill_out, 1) != NABLA_C_OK ||
      api->pass_op_set_args(ctx, 0, ops + 1, 1, "Out", relu_out, 1) != NABLA_C_OK)
    return NABLA_C_ERROR;
  t = api->pass_evaluate_on_host(ctx, 0, both, 1, "probe_c");
  if (!t || api->tensor_dtype(t) != NABLA_C_FLOAT32 || api->tensor_rank(t) != 2 || api->tensor_numel(t) != 4 ||
      !(data = (const float*)api->tensor_data(t, NABLA_C_FLOAT32)) || data[3] != -1.5f) {
    api->set_error(NABLA_C_RUNTIME, "toy_c_pass: pass_evaluate_on_host did not give fill_constant's value");
    return NABLA_C_ERROR;
  }
  t = api->pass_evaluate_on_host(ctx, 0, both, 2, "probe_r");
  if (!t || api->tensor_numel(t) != 4 || !(data = (const float*)api->tensor_data(t, NABLA_C_FLOAT32)) ||
      data[0] != 0.0f) {
    api->set_error(NABLA_C_RUNTIME, "toy_c_pass: pass_evaluate_on_host did not give relu's value");
    return NABLA_C_ERROR;
  }
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 0, both + 1, 1, "probe_r") == NULL, "evaluate (reads probe_c)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 0, first, 1, "y") == NULL, "evaluate (reads a feed)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 0, both, 1, "probe_r") == NULL, "evaluate (var not written)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 0, twice, 2, "probe_c") == NULL, "evaluate (op twice)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 0, past, 1, "probe_c") == NULL, "evaluate (op past the end)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 0, NULL, 1, "probe_c") == NULL, "evaluate (NULL ops)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 0, both, 1, NULL) == NULL, "evaluate (NULL var)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(ctx, 99, both, 1, "probe_c") == NULL, "evaluate (block 99)");
  EXPECT_FAILS(api, api->pass_evaluate_on_host(NULL, 0, both, 1, "probe_c") == NULL, "evaluate (NULL context)");
  return api->pass_remove_ops(ctx, 0, ops, ops + 2);
}

static int32_t Probe(const nabla_api* api, void* user, nabla_pass_context* ctx, size_t* changed) {
  size_t i, n = api->pass_keep_count(ctx);
  nabla_var_info info;
  int64_t dims[2] = {2, -3};
  uint32_t traits = 0;
  int32_t precision = -1;
  size_t ops = api->pass_op_count(ctx, 0);
  (void)user;
  *changed = 0;
  for (i = 0; i < n; ++i)
    if (strcmp(api->pass_keep(ctx, i), "probe_fails") == 0) return api->pass_op(ctx, 99, 0) ? NABLA_C_OK : NABLA_C_ERROR;
  EXPECT_FAILS(api, api->pass_keep(ctx, n) == NULL, "pass_keep past the end");
  EXPECT_FAILS(api, api->pass_block_count(NULL) == 0, "pass_block_count(NULL)");
  EXPECT_FAILS(api, api->pass_block_parent(ctx, 0, NULL) == NABLA_C_ERROR, "pass_block_parent(NULL)");
  EXPECT_FAILS(api, api->pass_op_count(ctx, 99) == 0, "pass_op_count of block 99");
  EXPECT_FAILS(api, api->pass_op(ctx, 99, 0) == NULL, "pass_op of block 99");
  EXPECT_FAILS(api, api->pass_op(ctx, 0, ops) == NULL, "pass_op past the end");
  EXPECT_FAILS(api, api->pass_op_pos(ctx, 0, ops, NULL, NULL) == NABLA_C_ERROR, "pass_op_pos past the end");
  EXPECT_FAILS(api, api->pass_op_set_pos(ctx, 0, 0, -1, 0) == NABLA_C_ERROR, "pass_op_set_pos(-1)");
  EXPECT_FAILS(api, api->pass_op_set_args(ctx, 0, ops, 0, "X", NULL, 0) == NABLA_C_ERROR, "pass_op_set_args past the end");
  EXPECT_FAILS(api, api->pass_op_set_args(ctx, 0, 0, 0, NULL, NULL, 0) == NABLA_C_ERROR, "pass_op_set_args(NULL slot)");
  EXPECT_FAILS(api, api->pass_op_set_args(ctx, 0, 0, 0, "X", NULL, 1) == NABLA_C_ERROR, "pass_op_set_args(NULL names)");
  EXPECT_FAILS(api, api->pass_op_remove_slot(ctx, 0, 0, 0, NULL) == NABLA_C_ERROR, "pass_op_remove_slot(NULL)");
  EXPECT_FAILS(api, api->pass_op_set_attr(ctx, 0, 0, "a", NULL) == NABLA_C_ERROR, "pass_op_set_attr(NULL value)");
  EXPECT_FAILS(api, api->pass_op_remove_attr(ctx, 0, ops, "a") == NABLA_C_ERROR, "pass_op_remove_attr past the end");
  EXPECT_FAILS(api, api->pass_insert_op(ctx, 0, ops + 1, "relu") == NABLA_C_ERROR, "pass_insert_op past the end");
  EXPECT_FAILS(api, api->pass_insert_op(ctx, 0, 0, NULL) == NABLA_C_ERROR, "pass_insert_op(NULL type)");
  EXPECT_FAILS(api, api->pass_remove_ops(ctx, 0, 1, 0) == NABLA_C_ERROR, "pass_remove_ops(1, 0)");
  EXPECT_FAILS(api, api->pass_remove_ops(ctx, 0, 0, ops + 1) == NABLA_C_ERROR, "pass_remove_ops past the end");
  EXPECT_FAILS(api, api->pass_var_name(ctx, 0, api->pass_var_count(ctx, 0)) == NULL, "pass_var_name past the end");
  memset(&info, 0, sizeof info);
  EXPECT_FAILS(api, api->pass_var_get(ctx, 0, "x", &info) == NABLA_C_ERROR, "pass_var_get(struct_size 0)");
  info.struct_size = sizeof info;
  EXPECT_FAILS(api, api->pass_var_get(ctx, 0, "no_such_var", &info) == NABLA_C_ERROR, "pass_var_get of no var");
  info.dtype = 99;
  EXPECT_FAILS(api, api->pass_var_set(ctx, 0, "probe_var", &info) == NABLA_C_ERROR, "pass_var_set(dtype 99)");
  info.dtype = NABLA_C_FLOAT32;
  info.flags = 1u << 20;
  EXPECT_FAILS(api, api->pass_var_set(ctx, 0, "probe_var", &info) == NABLA_C_ERROR, "pass_var_set(bad flags)");
  info.flags = 0;
  info.rank = 2;
  EXPECT_FAILS(api, api->pass_var_set(ctx, 0, "probe_var", &info) == NABLA_C_ERROR, "pass_var_set(NULL dims)");
  info.dims = dims;
  EXPECT_FAILS(api, api->pass_var_set(ctx, 0, "probe_var", &info) == NABLA_C_ERROR, "pass_var_set(dim -3)");
  EXPECT_FAILS(api, api->pass_var_set(ctx, 0, "", &info) == NABLA_C_ERROR, "pass_var_set(\"\")");
  EXPECT_FAILS(api, api->pass_remove_var(ctx, 0, "no_such_var") == NABLA_C_ERROR, "pass_remove_var of no var");
  /* An op of an unknown type has no defaults; it goes again at once. */
  if (api->pass_insert_op(ctx, 0, ops, "no_such_op_type") != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_FAILS(api, api->pass_op_fill_default_attrs(ctx, 0, ops) == NABLA_C_ERROR, "fill_default_attrs(unknown)");
  if (api->pass_remove_ops(ctx, 0, ops, ops + 1) != NABLA_C_OK) return NABLA_C_ERROR;
  if (EvaluateProbe(api, ctx, ops) != NABLA_C_OK) return NABLA_C_ERROR;
  EXPECT_FAILS(api, api->op_type_traits(NULL, &traits, &precision) == -1, "op_type_traits(NULL)");
  if (api->op_type_traits("no_such_op_type", &traits, &precision) != 0) {
    api->set_error(NABLA_C_RUNTIME, "toy_c_pass: op_type_traits found no_such_op_type");
    return NABLA_C_ERROR;
  }
  if (api->op_type_traits("mul", &traits, &precision) != 1 || precision != NABLA_C_PRECISION_LOW ||
      (traits & NABLA_C_TRAIT_HAS_SUB_BLOCK)) {
    api->set_error(NABLA_C_RUNTIME, "toy_c_pass: op_type_traits(mul) is not a low-precision op without a block");
    return NABLA_C_ERROR;
  }
  return NABLA_C_OK;
}

NABLA_C_PLUGIN(NABLA_PLUGIN_NAME, "0.9") {
  nabla_op_builder* b = api->op_new(registrar, "toy_c_pass_probe", __FILE__, __LINE__);
  if (!b || api->op_doc(b, "Checks the program-pass functions; computes nothing.") != NABLA_C_OK ||
      api->op_input(b, "X", "(Tensor) input", 0) != NABLA_C_OK ||
      api->op_output(b, "Out", "(Tensor) output", 0) != NABLA_C_OK || api->op_grad_maker_none(b) != NABLA_C_OK)
    return NABLA_C_ERROR;
  /* Refused: a bad phase, no function, no name. */
  if (api->op_rewrites(b, 2, "probe", Probe, NULL) == NABLA_C_OK ||
      api->op_rewrites(b, 0, "probe", NULL, NULL) == NABLA_C_OK ||
      api->op_rewrites(b, 0, "", Probe, NULL) == NABLA_C_OK) {
    api->set_error(NABLA_C_RUNTIME, "toy_c_pass: op_rewrites took a bad pass");
    return NABLA_C_ERROR;
  }
  return api->op_rewrites(b, 0, "probe", Probe, NULL);
}
