/* c_minimal_softsign: Out = X / (1 + |X|), elementwise, written in C against
 * nabla's C ABI (nabla/c_api.h) alone: its grad maker emits the grad op
 * c_minimal_softsign_grad (X@GRAD = Out@GRAD / (1 + |X|)^2), and both ops
 * get float32 and float64 CPU kernels. It needs nothing of nabla's C++ and
 * loads into any nabla whose C API version is at least the one it was
 * built with. */
#include <math.h>
#include <stddef.h>

#include "nabla/c_api.h"

#define CHECK(call)                             \
  do {                                          \
    if ((call) != NABLA_C_OK) return NABLA_C_ERROR; \
  } while (0)

/* Shape inference, shared by both ops: `out` takes the shape and dtype of X. */
static int32_t InferLikeX(const nabla_api* api, nabla_infer_context* c, const char* out) {
  int64_t dims[16];
  const int64_t rank = api->infer_input_rank(c, "X", 0);
  if (rank < 0) return NABLA_C_ERROR;
  if (rank > 16) {
    api->set_error(NABLA_C_INVALID_ARGUMENT, "c_minimal: expected X of rank at most 16");
    return NABLA_C_ERROR;
  }
  CHECK(api->infer_input_dims(c, "X", 0, dims));
  const int32_t dtype = api->infer_input_dtype(c, "X", 0);
  if (dtype < 0) return NABLA_C_ERROR;
  CHECK(api->infer_set_output_shape(c, out, 0, dims, (size_t)rank));
  return api->infer_set_output_dtype(c, out, 0, dtype);
}

static int32_t InferForward(const nabla_api* api, void* user, nabla_infer_context* c) {
  (void)user;
  return InferLikeX(api, c, "Out");
}

static int32_t InferGrad(const nabla_api* api, void* user, nabla_infer_context* c) {
  (void)user;
  return InferLikeX(api, c, "X@GRAD");
}

/* X, Out@GRAD -> X@GRAD; a gradient nobody wants (@EMPTY@) gets no op. */
static int32_t MakeGrad(const nabla_api* api, void* user, nabla_grad_context* g) {
  (void)user;
  const nabla_op* fwd = api->grad_forward_op(g);
  const char* x = api->op_arg(fwd, 0, "X", 0);
  const char* dout = api->grad_name(g, 1, "Out", 0);
  const char* dx = api->grad_name(g, 0, "X", 0);
  if (!fwd || !x || !dout || !dx) return NABLA_C_ERROR;
  if (dx[0] == '@') return NABLA_C_OK; /* @EMPTY@ */
  nabla_new_op* op = api->grad_new_op(g, "c_minimal_softsign_grad");
  if (!op) return NABLA_C_ERROR;
  CHECK(api->new_op_set_args(op, 0, "X", &x, 1));
  CHECK(api->new_op_set_args(op, 0, "Out@GRAD", &dout, 1));
  return api->new_op_set_args(op, 1, "X@GRAD", &dx, 1);
}

/* The kernels: one body per dtype. `user` says which dtype was registered. */
static int32_t Forward(const nabla_api* api, void* user, nabla_kernel_context* ctx) {
  const int32_t dtype = (int32_t)(size_t)user;
  const nabla_tensor* x = api->kernel_input(ctx, "X", 0);
  nabla_tensor* out = api->kernel_output(ctx, "Out", 0);
  if (!x) return NABLA_C_ERROR;
  if (!out) return NABLA_C_OK;
  const int64_t n = api->tensor_numel(x);
  const void* px = api->tensor_data(x, dtype);
  void* po = api->tensor_allocate(out, api->kernel_device(ctx), dtype, api->tensor_dims(x), api->tensor_rank(x));
  if (!px || (!po && n > 0)) return NABLA_C_ERROR;
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == NABLA_C_FLOAT32) {
      const float v = ((const float*)px)[i];
      ((float*)po)[i] = v / (1.0f + fabsf(v));
    } else {
      const double v = ((const double*)px)[i];
      ((double*)po)[i] = v / (1.0 + fabs(v));
    }
  }
  return NABLA_C_OK;
}

static int32_t Backward(const nabla_api* api, void* user, nabla_kernel_context* ctx) {
  const int32_t dtype = (int32_t)(size_t)user;
  nabla_tensor* dx = api->kernel_output(ctx, "X@GRAD", 0);
  if (!dx) return NABLA_C_OK; /* nobody needs it */
  const nabla_tensor* x = api->kernel_input(ctx, "X", 0);
  const nabla_tensor* dout = api->kernel_input(ctx, "Out@GRAD", 0);
  if (!x || !dout) return NABLA_C_ERROR;
  const int64_t n = api->tensor_numel(x);
  if (api->tensor_numel(dout) != n) {
    api->set_error(NABLA_C_INVALID_ARGUMENT,
                   "op 'c_minimal_softsign_grad': expected Out@GRAD with as many elements as X");
    return NABLA_C_ERROR;
  }
  const void* px = api->tensor_data(x, dtype);
  const void* pd = api->tensor_data(dout, dtype);
  void* pdx = api->tensor_allocate(dx, api->kernel_device(ctx), dtype, api->tensor_dims(x), api->tensor_rank(x));
  if (!px || !pd || (!pdx && n > 0)) return NABLA_C_ERROR;
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == NABLA_C_FLOAT32) {
      const float d = 1.0f + fabsf(((const float*)px)[i]);
      ((float*)pdx)[i] = ((const float*)pd)[i] / (d * d);
    } else {
      const double d = 1.0 + fabs(((const double*)px)[i]);
      ((double*)pdx)[i] = ((const double*)pd)[i] / (d * d);
    }
  }
  return NABLA_C_OK;
}

NABLA_C_PLUGIN(NABLA_PLUGIN_NAME, "1.0") {
  nabla_op_builder* fwd = api->op_new(registrar, "c_minimal_softsign", __FILE__, __LINE__);
  if (!fwd) return NABLA_C_ERROR;
  CHECK(api->op_doc(fwd, "Softsign: Out = X / (1 + |X|), elementwise."));
  CHECK(api->op_input(fwd, "X", "(Tensor) input of any shape, float32 or float64", 0));
  CHECK(api->op_output(fwd, "Out", "(Tensor) softsign(X), shape and dtype of X", 0));
  CHECK(api->op_infer_shape(fwd, InferForward, NULL));
  CHECK(api->op_grad_maker(fwd, MakeGrad, NULL));

  /* The gradient check: float64 central differences over X in [-3, 3), kept
   * away from the kink of |X| at 0. */
  const int64_t dims[2] = {3, 4};
  const double kinks[1] = {0.0};
  nabla_grad_check_input in = {0};
  in.struct_size = sizeof in;
  in.dtype = NABLA_C_FLOAT64;
  in.slot = "X";
  in.dims = dims;
  in.rank = 2;
  in.low = -3.0;
  in.high = 3.0;
  in.kinks = kinks;
  in.kink_count = 1;
  in.kink_margin = 0.05;
  in.check = 1;
  nabla_grad_check check = {0};
  check.struct_size = sizeof check;
  check.name = "x_3x4";
  check.inputs = &in;
  check.input_count = 1;
  CHECK(api->op_grad_check(fwd, &check));

  nabla_op_builder* grad = api->op_new(registrar, "c_minimal_softsign_grad", __FILE__, __LINE__);
  if (!grad) return NABLA_C_ERROR;
  CHECK(api->op_doc(grad, "Gradient of c_minimal_softsign: X@GRAD = Out@GRAD / (1 + |X|)^2."));
  CHECK(api->op_input(grad, "X", "(Tensor) the forward input", 0));
  CHECK(api->op_input(grad, "Out@GRAD", "(Tensor) gradient of Out", 0));
  CHECK(api->op_output(grad, "X@GRAD", "(Tensor) gradient of X", NABLA_C_SLOT_DISPENSABLE));
  CHECK(api->op_infer_shape(grad, InferGrad, NULL));

  const int32_t dtypes[2] = {NABLA_C_FLOAT32, NABLA_C_FLOAT64};
  for (int k = 0; k < 2; ++k) {
    void* user = (void*)(size_t)dtypes[k];
    CHECK(api->kernel(registrar, "c_minimal_softsign", NABLA_C_DEVICE_CPU, dtypes[k], Forward, user, __FILE__,
                      __LINE__));
    CHECK(api->kernel(registrar, "c_minimal_softsign_grad", NABLA_C_DEVICE_CPU, dtypes[k], Backward, user, __FILE__,
                      __LINE__));
  }
  return NABLA_C_OK;
}
