/* nabla's C ABI for plugins (docs/plugin-abi.md).
 *
 * A plugin built against this header depends on no C++ symbol of nabla and
 * on no compiler's C++ ABI: it may be written in C, or in C++ with any
 * compiler (the header-only C++ SDK, nabla/sdk/, sits on top of this), and it
 * keeps loading into later nabla releases.
 *
 * The contract:
 *   - a plugin exports two symbols: the data object `nabla_plugin_manifest_v1`
 *     (which API version and table size it was built for, its name and
 *     version) and the function `nabla_plugin_init`; NABLA_C_PLUGIN writes
 *     both;
 *   - the core reads the manifest, refuses a plugin built for a newer
 *     api_version or a longer table than its own, and calls
 *     nabla_plugin_init(api, registrar) once with its function table;
 *   - everything the plugin registers is staged and published only when init
 *     returns 0 and the whole batch validates (all or nothing);
 *   - the table only grows: a new function is appended at the end (with
 *     NABLA_C_API_VERSION raised); nothing is reordered, removed or changes
 *     its signature. A plugin built against version N may call only the
 *     slots that fit in the struct_size it was handed.
 *
 * Errors: a function of the table that fails returns NULL, -1 or
 * NABLA_C_ERROR and records the error on the calling thread (last_error).
 * A callback of the plugin reports failure by returning NABLA_C_ERROR, after
 * set_error (or after a failed table call, whose error it may pass on as is).
 * Nothing may unwind across this boundary.
 *
 * Pointers handed to callbacks (contexts, tensors, ops, the strings they
 * return) are valid only during the callback. Strings passed in are copied.
 * The `user` pointer given with a callback is passed back unchanged; the
 * core never frees it (plugins are never unloaded).
 */
#ifndef NABLA_C_API_H_
#define NABLA_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header. Raised by one with every release that appends
 * functions (version 2: device plugins; version 3: the CPU backend's GEMM
 * and vector math, and views; version 4: copies and
 * variables, program passes, and the CPU backend's row kernels; version 5:
 * variables, tensor arrays and var-type inference, and the CPU backend's
 * GEMM with a fused bias and activation; version 6: control flow: scopes,
 * running blocks, block attributes; version 7: a kernel's attribute reads
 * and op versions; version 8: inputs a bfloat16 kernel also takes in
 * float32; version 9: the CPU row kernels over many rows a call). */
#define NABLA_C_API_VERSION 9
/* First field of the manifest: says "this is a nabla C plugin manifest". */
#define NABLA_C_PLUGIN_MAGIC 0x4e41424cu /* "NABL" */

#define NABLA_C_OK 0
#define NABLA_C_ERROR 1

/* Opaque handles: what they point at belongs to the core. */
typedef struct nabla_registrar nabla_registrar;           /* the staging area of one plugin load */
typedef struct nabla_op_builder nabla_op_builder;         /* one op being registered */
typedef struct nabla_op nabla_op;                         /* an op of a program, read only */
typedef struct nabla_new_op nabla_new_op;                 /* an op a grad maker is building */
typedef struct nabla_infer_context nabla_infer_context;   /* shape and dtype inference of one op */
typedef struct nabla_grad_context nabla_grad_context;     /* one grad maker call */
typedef struct nabla_kernel_context nabla_kernel_context; /* one kernel call */
typedef struct nabla_tensor nabla_tensor;
typedef struct nabla_device nabla_device;
typedef struct nabla_device_list nabla_device_list;       /* what a device backend's enumerate fills (version 2) */
typedef struct nabla_fusion_context nabla_fusion_context; /* one matched chain of a fusion pattern (version 3) */
typedef struct nabla_pass_context nabla_pass_context;     /* one run of a program pass (version 4) */
typedef struct nabla_var nabla_var;                       /* a var of a scope at run time (version 5) */
typedef struct nabla_scope nabla_scope;                   /* a scope of a run (version 6) */

/* Enumerations are int32_t values; these numbers never change. */
enum nabla_c_error_kind {
  NABLA_C_INVALID_ARGUMENT = 0,
  NABLA_C_NOT_FOUND = 1,
  NABLA_C_ALREADY_EXISTS = 2,
  NABLA_C_OUT_OF_RANGE = 3,
  NABLA_C_PRECONDITION_NOT_MET = 4,
  NABLA_C_UNIMPLEMENTED = 5,
  NABLA_C_EXTERNAL = 6,
  NABLA_C_RUNTIME = 7
};

enum nabla_c_dtype {
  NABLA_C_FLOAT32 = 0,
  NABLA_C_FLOAT64 = 1,
  NABLA_C_INT32 = 2,
  NABLA_C_INT64 = 3,
  NABLA_C_BOOL = 4,
  NABLA_C_BFLOAT16 = 5
};

/* Device type ids: cpu and opencl are fixed; any other type (a device
 * plugin's) gets its id from its name through device_type_id (version 2). */
enum nabla_c_device_type { NABLA_C_DEVICE_CPU = 0, NABLA_C_DEVICE_OPENCL = 1 };

enum nabla_c_attr_type {
  NABLA_C_ATTR_INT = 0,
  NABLA_C_ATTR_FLOAT = 1,
  NABLA_C_ATTR_STRING = 2,
  NABLA_C_ATTR_BOOL = 3,
  NABLA_C_ATTR_INTS = 4,
  NABLA_C_ATTR_FLOATS = 5,
  NABLA_C_ATTR_STRINGS = 6,
  NABLA_C_ATTR_BOOLS = 7,
  /* Version 6: a block of the op's program (a control-flow op's
   * sub_block), its index in the value's `i`. op_get_attr never hands one
   * out (plugins built for earlier versions would not know it): read it
   * with op_get_block_attr. */
  NABLA_C_ATTR_BLOCK = 8
};

/* Slot flags (op_input, op_output): the meaning of nabla's SlotFlags. */
enum nabla_c_slot_flags {
  NABLA_C_SLOT_DUPLICABLE = 1u << 0,
  NABLA_C_SLOT_DISPENSABLE = 1u << 1,
  NABLA_C_SLOT_NO_BUFFER = 1u << 2,
  NABLA_C_SLOT_NO_GRAD = 1u << 3
};

/* Traits (op_traits): the meaning of nabla's OpTraits. */
enum nabla_c_traits {
  NABLA_C_TRAIT_RANDOM = 1u << 0,
  NABLA_C_TRAIT_UPDATES_IN_PLACE = 1u << 1,
  NABLA_C_TRAIT_ARRAY_IO = 1u << 2,
  NABLA_C_TRAIT_COLLECTIVE = 1u << 3,
  NABLA_C_TRAIT_DTYPE_CAST = 1u << 4,
  /* Version 4, read only (op_type_traits): the op owns a block (a block
   * attribute), and runs blocks itself. Since version 6, op_traits takes
   * NABLA_C_TRAIT_CONTROL_FLOW (a kernel that calls kernel_run_block);
   * HAS_SUB_BLOCK follows from declaring a block attribute. */
  NABLA_C_TRAIT_HAS_SUB_BLOCK = 1u << 5,
  NABLA_C_TRAIT_CONTROL_FLOW = 1u << 6,
  /* Version 8: the op's outputs are elements of its input, unchanged
   * (reshape, transpose): a dtype cast commutes with it. */
  NABLA_C_TRAIT_MOVES_DATA = 1u << 7
};

/* A var's flags (nabla_var_info, version 4). */
enum nabla_c_var_flags {
  NABLA_C_VAR_DTYPE_KNOWN = 1u << 0, /* dtype was declared or inferred; otherwise it is not known yet */
  NABLA_C_VAR_PERSISTABLE = 1u << 1,
  NABLA_C_VAR_STOP_GRADIENT = 1u << 2,
  NABLA_C_VAR_DECLARED = 1u << 3 /* declared by the program's author (written back to YAML) */
};

/* What a var holds (var_type; nabla_var_info's var_type; version 5). */
enum nabla_c_var_type {
  NABLA_C_VAR_DENSE = 0,        /* a tensor */
  NABLA_C_VAR_TENSOR_ARRAY = 1, /* a list of tensors; entries never written hold no data */
  NABLA_C_VAR_STEP_SCOPES = 2   /* the scopes a control-flow op kept for its gradient */
};

/* The vectorised float32 functions of cpu_vmath (version 3). */
enum nabla_c_vmath_fn {
  NABLA_C_VMATH_TANH = 0,     /* tanh, a few ulp from tanhf */
  NABLA_C_VMATH_GELU = 1,     /* x * Phi(x), Phi the standard normal CDF (gelu's erf form) */
  NABLA_C_VMATH_GELU_TANH = 2 /* gelu's tanh approximation */
};

/* Version 5: the activation cpu_gemm_bias_act's oneDNN path applies as a
 * post-op of its matmul, and the library it forces. */
enum nabla_c_gemm_act {
  NABLA_C_GEMM_ACT_IDENTITY = 0,
  NABLA_C_GEMM_ACT_RELU = 1,
  NABLA_C_GEMM_ACT_TANH = 2,
  NABLA_C_GEMM_ACT_SIGMOID = 3
};
enum nabla_c_gemm_lib {
  NABLA_C_GEMM_LIB_POLICY = -1, /* the backend's GEMM policy picks, block by block */
  NABLA_C_GEMM_LIB_OPENBLAS = 0,
  NABLA_C_GEMM_LIB_ONEDNN = 1
};

enum nabla_c_precision {
  NABLA_C_PRECISION_FOLLOW_INPUTS = 0,
  NABLA_C_PRECISION_LOW = 1,
  NABLA_C_PRECISION_FLOAT32 = 2
};

/* One attribute value. `type` says which field holds it: i (int), f
 * (float), b (bool, 0 or 1), s (string, NUL-terminated), or list + count:
 * ints as const int32_t*, floats as const float*, bools as const int32_t*,
 * strings as const char* const*. A value the core hands out stays valid
 * until the callback returns. */
typedef struct nabla_attr_value {
  int32_t type;
  int32_t b;
  int64_t i;
  double f;
  const char* s;
  const void* list;
  size_t count;
} nabla_attr_value;

/* One input var of a gradient check case (nabla/gradcheck.h's
 * GradCheckInput). struct_size = sizeof(nabla_grad_check_input). */
typedef struct nabla_grad_check_input {
  uint32_t struct_size;
  int32_t dtype; /* NABLA_C_FLOAT64 for float inputs */
  const char* slot;
  const int64_t* dims;
  size_t rank;
  double low, high;
  const double* kinks;
  size_t kink_count;
  double kink_margin;
  const double* values; /* fixed values, row-major; NULL: uniform in [low, high) */
  size_t value_count;
  int32_t check; /* compute and check this input's gradient */
  int32_t count; /* vars in the slot (duplicable slots); 0 means 1 */
} nabla_grad_check_input;

/* One gradient check case (GradCheckSpec). struct_size =
 * sizeof(nabla_grad_check). Zero for max_relative_error, abs_threshold or
 * delta takes the default (0.005, 1e-3, 1e-5). */
typedef struct nabla_grad_check {
  uint32_t struct_size;
  const char* name;
  const nabla_grad_check_input* inputs;
  size_t input_count;
  const char* const* output_slots; /* empty: every output slot, one var each */
  const int32_t* output_counts;
  size_t output_count;
  const char* const* no_grad_outputs;
  size_t no_grad_output_count;
  const char* const* attr_names;
  const nabla_attr_value* attr_values;
  size_t attr_count;
  double max_relative_error, abs_threshold, delta;
} nabla_grad_check;

struct nabla_api;

/* Callbacks a plugin hands the core. Each returns NABLA_C_OK or
 * NABLA_C_ERROR; `api` is the table the plugin was initialised with. */
typedef int32_t (*nabla_infer_fn)(const struct nabla_api* api, void* user, nabla_infer_context* ctx);
typedef int32_t (*nabla_grad_fn)(const struct nabla_api* api, void* user, nabla_grad_context* ctx);
typedef int32_t (*nabla_kernel_fn)(const struct nabla_api* api, void* user, nabla_kernel_context* ctx);
typedef int32_t (*nabla_attr_check_fn)(const struct nabla_api* api, void* user, const nabla_attr_value* value);
typedef void (*nabla_range_fn)(void* user, int64_t begin, int64_t end);
/* Version 5, cpu_gemm_bias_act's epilogue: adds the bias to and applies the
 * activation on C's rows [row, row + rows) x columns [col, col + cols). Runs
 * on the backend's threads, one block each; must not unwind. */
typedef void (*nabla_gemm_epilogue_fn)(void* user, int64_t row, int64_t col, int64_t rows, int64_t cols);
/* Version 3. Sets *dtype (a nabla_c_dtype): which of the op's kernels runs,
 * where its first input's dtype does not tell (a comparison's bool output,
 * an op whose first input is a shape). */
typedef int32_t (*nabla_kernel_dtype_fn)(const struct nabla_api* api, void* user, nabla_kernel_context* ctx,
                                         int32_t* dtype);
/* Version 3. Sets *count: how many vars a duplicable output slot gets,
 * from the op's attributes and inputs (split's num or sections); -1 when
 * they do not tell. Eager calls and Python's nabla.ops size the slot with
 * it. */
typedef int32_t (*nabla_output_count_fn)(const struct nabla_api* api, void* user, const nabla_op* op, int32_t* count);
/* Version 3, fusion patterns (op_fuses). fuse builds the op that replaces a
 * matched chain (fusion_new_op, then new_op_set_args / new_op_set_attr);
 * building none leaves that match alone. applies (optional, asked first)
 * sets *applies to 1 when the matched chain may be fused, 0 when not (a
 * fused op exact only for some shapes of the chain's vars). */
typedef int32_t (*nabla_fuse_fn)(const struct nabla_api* api, void* user, nabla_fusion_context* ctx);
typedef int32_t (*nabla_fuse_applies_fn)(const struct nabla_api* api, void* user, nabla_fusion_context* ctx,
                                         int32_t* applies);
/* Version 4, program passes (op_rewrites): edits the program of ctx in
 * place through the pass_* functions and sets *changed to how many places
 * it changed (0: it left the program as it was). */
typedef int32_t (*nabla_pass_fn)(const struct nabla_api* api, void* user, nabla_pass_context* ctx, size_t* changed);

/* Version 5, var-type inference (op_infer_var_type): sets the var types
 * (and dtypes) of op's outputs in its block, through the pass_* functions
 * of ctx (pass_var_get, pass_var_set with var_type), before shapes are
 * inferred. `block` is the op's block in ctx's program; the callback
 * may only read and set vars (pass_var_* and pass_block_*), not edit ops. */
typedef int32_t (*nabla_infer_var_type_fn)(const struct nabla_api* api, void* user, const nabla_op* op,
                                           nabla_pass_context* ctx, size_t block);

/* One var of a program (pass_var_get, pass_var_set; version 4).
 * struct_size = sizeof(nabla_var_info); later versions append fields. */
typedef struct nabla_var_info {
  uint32_t struct_size;
  int32_t dtype;       /* nabla_c_dtype (meaningful with NABLA_C_VAR_DTYPE_KNOWN) */
  uint32_t flags;      /* nabla_c_var_flags */
  uint32_t reserved;   /* 0 */
  const int64_t* dims; /* the declared shape (-1: a dim unknown until run time); NULL when rank is 0 */
  size_t rank;
} nabla_var_info;

/* ---- device plugins (version 2)
 *
 * A device backend is what `--device NAME[:N]` resolves to: how to list its
 * devices, open one, and manage that device's memory. Its devices have the
 * device type NAME; kernels for them are registered like any other, with the
 * id of that type. `device` below is what open returned for the device.
 * Callbacks may be called from several threads at once. */

/* Flags of a device backend. */
enum nabla_c_device_flags {
  /* An op with no kernel for this device runs its CPU kernel on host copies
   * of its inputs (as on OpenCL). Without it, such an op is an error naming
   * the op and the device. */
  NABLA_C_DEVICE_HOST_FALLBACK = 1u << 0
};

/* Lists the devices: device_list_add once per device, in index order. */
typedef int32_t (*nabla_device_enumerate_fn)(const struct nabla_api* api, void* user, nabla_device_list* list);
/* Opens device `index` (0 when --device named no index), once per process:
 * the device's own state, NULL (after set_error) when there is no such
 * device. The core never closes it. */
typedef void* (*nabla_device_open_fn)(const struct nabla_api* api, void* user, int32_t index);
/* bytes of device memory (bytes > 0); NULL on failure (after set_error). */
typedef void* (*nabla_device_allocate_fn)(const struct nabla_api* api, void* user, void* device, size_t bytes);
typedef void (*nabla_device_deallocate_fn)(const struct nabla_api* api, void* user, void* device, void* ptr,
                                           size_t bytes);
/* Copies bytes: host to device, device to host, or within the device. */
typedef int32_t (*nabla_device_copy_fn)(const struct nabla_api* api, void* user, void* device, void* dst,
                                        const void* src, size_t bytes);
/* Waits until everything queued on the device has finished. */
typedef int32_t (*nabla_device_synchronize_fn)(const struct nabla_api* api, void* user, void* device);

/* A device backend (device_backend). Every callback is required.
 * struct_size = sizeof(nabla_device_backend); later versions append fields. */
typedef struct nabla_device_backend {
  uint32_t struct_size;
  uint32_t flags;         /* nabla_c_device_flags */
  const char* name;       /* what --device takes: letters, digits and '_' (copied) */
  const char* none_found; /* why an empty listing is empty ("no skeleton card found"); may be NULL */
  void* user;             /* passed to every callback */
  nabla_device_enumerate_fn enumerate;
  nabla_device_open_fn open;
  nabla_device_allocate_fn allocate;
  nabla_device_deallocate_fn deallocate;
  nabla_device_copy_fn copy_from_host;
  nabla_device_copy_fn copy_to_host;
  nabla_device_copy_fn copy_on_device;
  nabla_device_synchronize_fn synchronize;
} nabla_device_backend;

/* The table. Append only (docs/plugin-abi.md). `output` arguments pick
 * output slots (1) or input slots (0). Indices are 0-based. */
typedef struct nabla_api {
  uint32_t api_version; /* NABLA_C_API_VERSION of the core */
  uint32_t struct_size; /* sizeof(nabla_api) of the core: the slots that exist */

  /* ---- errors */
  void (*set_error)(int32_t kind, const char* message);
  /* The calling thread's last error message ("" if none); *kind gets its kind when kind is not NULL. */
  const char* (*last_error)(int32_t* kind);

  /* ---- registration (inside nabla_plugin_init only) */
  nabla_op_builder* (*op_new)(nabla_registrar* r, const char* type, const char* file, int32_t line);
  /* A grad op whose slots follow the default grad maker of fwd_type (registered in the same plugin). */
  nabla_op_builder* (*op_new_default_grad)(nabla_registrar* r, const char* fwd_type, const char* file, int32_t line);
  int32_t (*op_doc)(nabla_op_builder* b, const char* doc);
  int32_t (*op_input)(nabla_op_builder* b, const char* name, const char* doc, uint32_t flags);
  int32_t (*op_output)(nabla_op_builder* b, const char* name, const char* doc, uint32_t flags);
  /* default_value NULL: the attribute is required. checker may be NULL. */
  int32_t (*op_attr)(nabla_op_builder* b, const char* name, int32_t type, const nabla_attr_value* default_value,
                     const char* doc, nabla_attr_check_fn checker, void* checker_user);
  int32_t (*op_infer_shape)(nabla_op_builder* b, nabla_infer_fn fn, void* user);
  int32_t (*op_grad_maker)(nabla_op_builder* b, nabla_grad_fn fn, void* user);
  /* The default grad maker: `<type>_grad` reading X, Out, Out@GRAD and writing X@GRAD. */
  int32_t (*op_grad_maker_default)(nabla_op_builder* b);
  /* The op deliberately has no gradient. */
  int32_t (*op_grad_maker_none)(nabla_op_builder* b);
  int32_t (*op_traits)(nabla_op_builder* b, uint32_t traits, int32_t precision);
  int32_t (*op_grad_check)(nabla_op_builder* b, const nabla_grad_check* check);
  int32_t (*kernel)(nabla_registrar* r, const char* type, int32_t device_type, int32_t dtype, nabla_kernel_fn fn,
                    void* user, const char* file, int32_t line);

  /* ---- ops, read only */
  const char* (*op_type)(const nabla_op* op);
  size_t (*op_slot_count)(const nabla_op* op, int32_t output);
  const char* (*op_slot_name)(const nabla_op* op, int32_t output, size_t i);
  /* Arguments of a slot; 0 when the slot is absent. */
  size_t (*op_arg_count)(const nabla_op* op, int32_t output, const char* slot);
  const char* (*op_arg)(const nabla_op* op, int32_t output, const char* slot, size_t i);
  size_t (*op_attr_count)(const nabla_op* op);
  const char* (*op_attr_name)(const nabla_op* op, size_t i);
  int32_t (*op_get_attr)(const nabla_op* op, const char* name, nabla_attr_value* out);

  /* ---- shape and dtype inference */
  const nabla_op* (*infer_op)(nabla_infer_context* c);
  int32_t (*infer_is_runtime)(nabla_infer_context* c);
  /* A slot is present when it has an argument that is not @EMPTY@. */
  int32_t (*infer_has)(nabla_infer_context* c, int32_t output, const char* slot);
  size_t (*infer_count)(nabla_infer_context* c, int32_t output, const char* slot);
  /* Rank of input slot[i] (-1 on error), then its dims (-1: unknown at build time). */
  int64_t (*infer_input_rank)(nabla_infer_context* c, const char* slot, size_t i);
  int32_t (*infer_input_dims)(nabla_infer_context* c, const char* slot, size_t i, int64_t* dims);
  /* -1 on error; also at build time for an input whose dtype is not known
   * yet: a shape function that then fails (NABLA_C_ERROR) stops inference,
   * its outputs' dtypes left unknown, without an error. */
  int32_t (*infer_input_dtype)(nabla_infer_context* c, const char* slot, size_t i);
  int32_t (*infer_set_output_shape)(nabla_infer_context* c, const char* slot, size_t i, const int64_t* dims,
                                    size_t rank);
  int32_t (*infer_set_output_dtype)(nabla_infer_context* c, const char* slot, size_t i, int32_t dtype);
  /* "op 'mul' (prog.yaml:3:7)", for messages. */
  const char* (*infer_where)(nabla_infer_context* c);

  /* ---- grad makers */
  const nabla_op* (*grad_forward_op)(nabla_grad_context* c);
  /* The gradient name of argument i of a forward slot: x@GRAD, or @EMPTY@ where no gradient is wanted. */
  const char* (*grad_name)(nabla_grad_context* c, int32_t output, const char* slot, size_t i);
  int32_t (*grad_is_no_grad_input)(nabla_grad_context* c, const char* slot);
  /* Appends an op to the maker's result, with no slots and no attributes. */
  nabla_new_op* (*grad_new_op)(nabla_grad_context* c, const char* type);
  int32_t (*new_op_set_args)(nabla_new_op* op, int32_t output, const char* slot, const char* const* names, size_t n);
  int32_t (*new_op_set_attr)(nabla_new_op* op, const char* name, const nabla_attr_value* value);

  /* ---- kernels */
  const nabla_op* (*kernel_op)(nabla_kernel_context* c);
  /* Vars of a slot, 0 when absent. */
  size_t (*kernel_count)(nabla_kernel_context* c, int32_t output, const char* slot);
  /* NULL (an error naming the slot) when the input is absent. */
  const nabla_tensor* (*kernel_input)(nabla_kernel_context* c, const char* slot, size_t i);
  /* NULL without an error when the output is absent or @EMPTY@: nobody needs it. */
  nabla_tensor* (*kernel_output)(nabla_kernel_context* c, const char* slot, size_t i);
  nabla_device* (*kernel_device)(nabla_kernel_context* c);
  uint64_t (*kernel_seed)(nabla_kernel_context* c);

  /* ---- tensors */
  int32_t (*tensor_dtype)(const nabla_tensor* t);
  size_t (*tensor_rank)(const nabla_tensor* t);
  const int64_t* (*tensor_dims)(const nabla_tensor* t);
  int64_t (*tensor_numel)(const nabla_tensor* t);
  /* The data, checked to be of `dtype` and allocated; NULL on error. */
  void* (*tensor_data)(const nabla_tensor* t, int32_t dtype);
  /* Sizes the tensor to dims on the device and returns its data. */
  void* (*tensor_allocate)(nabla_tensor* t, nabla_device* d, int32_t dtype, const int64_t* dims, size_t rank);

  /* ---- devices and threads */
  int32_t (*device_type)(const nabla_device* d);
  /* body(user, begin, end) over chunks of [0, n) on the executor's threads. */
  void (*parallel_for)(int64_t n, int64_t grain, nabla_range_fn body, void* user);

  /* ---- version 2: device plugins */
  /* The id of device type `name` (letters, digits and '_'), which it gets
   * when first named: an op plugin registers kernels for a device plugin's
   * type with it, whichever of the two loads first. -1 on error. */
  int32_t (*device_type_id)(const char* name);
  /* The name of device type `id` ("cpu", "skeleton"); NULL for an id no one named. */
  const char* (*device_type_name)(int32_t id);
  /* Registers a device backend (staged like ops: published when the plugin's
   * init succeeds). Refused: a name already registered (by any plugin or
   * built in) or twice in one plugin, a NULL callback, unknown flags. Returns
   * the id of its device type (the backend's name), -1 on error. A plugin
   * with a backend may register kernels for ops of other plugins on that
   * device type (the standard ops on its device). */
  int32_t (*device_backend)(nabla_registrar* r, const nabla_device_backend* backend);
  /* Inside enumerate: the next device, NAME:<its index>, described by lines
   * (the first is its summary); fp64: float64 kernels can run there. */
  int32_t (*device_list_add)(nabla_device_list* list, const char* const* lines, size_t line_count, int32_t fp64);
  /* What the backend's open returned for device d; NULL for a device no C
   * ABI backend opened (the CPU). Only the backend's plugin knows its type. */
  void* (*device_state)(const nabla_device* d);

  /* ---- version 3: the CPU backend's math, and views
   *
   * What nabla's own CPU kernels compute with: a plugin's kernel gets the
   * same GEMM (the library nabla's GEMM policy picks, split across the
   * executor's threads) and the same vectorised functions (so it computes
   * nabla's ops' bits) without linking a BLAS of its own. Host memory only. */
  /* Row-major C = alpha * op(A) * op(B) + beta * C, op(A) M x K, op(B)
   * K x N, transposed where trans_a / trans_b are non-zero; leading
   * dimensions are those of the matrices as stored. dtype NABLA_C_FLOAT32
   * (a, b, c are float*, alpha and beta rounded to float) or NABLA_C_FLOAT64
   * (double*). M, N or K may be 0 (K = 0: C = beta * C). */
  int32_t (*cpu_gemm)(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                      const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc);
  /* y = fn(x) over n float32 (fn a nabla_c_vmath_fn); y may be x. */
  int32_t (*cpu_vmath)(int32_t fn, const float* x, float* y, int64_t n);
  /* dx = dy * gelu'(x) over n float32 (approximate: the tanh form); dx may
   * be x or dy. */
  int32_t (*cpu_gelu_grad)(const float* x, const float* dy, float* dx, int64_t n, int32_t approximate);
  /* Makes output t a view of input src: the same data, no copy, with dims
   * (rank of them) holding as many elements as src (reshape, squeeze,
   * flatten). */
  int32_t (*tensor_share)(nabla_tensor* t, const nabla_tensor* src, const int64_t* dims, size_t rank);
  /* Tensor-valued attributes (a shape, a rate given by an input): copies
   * the values of input slot[i], wherever the tensor lives, to host memory
   * dst, which holds count elements of dtype; dtype must be the input's
   * and count its element count. In inference only at run time
   * (infer_is_runtime): at build time the values are unknown and this fails
   * (a shape function then leaves the dims they decide at -1). */
  int32_t (*infer_input_values)(nabla_infer_context* c, const char* slot, size_t i, int32_t dtype, void* dst,
                                size_t count);
  int32_t (*kernel_input_values)(nabla_kernel_context* c, const char* slot, size_t i, int32_t dtype, void* dst,
                                 size_t count);
  /* The op's kernel dtype (default: its first input's), and the var count
   * of its duplicable output slot `slot`; see the callbacks' types. */
  int32_t (*op_kernel_dtype)(nabla_op_builder* b, nabla_kernel_dtype_fn fn, void* user);
  int32_t (*op_output_count)(nabla_op_builder* b, const char* slot, nabla_output_count_fn fn, void* user);
  /* Fusion patterns: this op replaces the chain of op types (length of
   * them, in program order, each linked to the next through the one of its
   * outputs the next reads), where the fusion pass (FuseOps) finds it and
   * its rules hold (docs/performance.md). The op that declares the pattern
   * knows the names; the core only matches them. */
  int32_t (*op_fuses)(nabla_op_builder* b, const char* const* chain, size_t length, nabla_fuse_fn fuse,
                      nabla_fuse_applies_fn applies, void* user);
  /* The matched ops, in the chain's order. */
  size_t (*fusion_match_count)(nabla_fusion_context* c);
  const nabla_op* (*fusion_match)(nabla_fusion_context* c, size_t i);
  /* In fuse only: the replacing op (one), with no slots and no attributes. */
  nabla_new_op* (*fusion_new_op)(nabla_fusion_context* c, const char* type);
  /* In applies only, the chain's block: its ops, and a var's dtype (-1:
   * not known yet, or no such var) and declared shape (rank -1: no such
   * var; a dim -1: unknown), looked up through the enclosing blocks. */
  size_t (*fusion_block_op_count)(nabla_fusion_context* c);
  const nabla_op* (*fusion_block_op)(nabla_fusion_context* c, size_t i);
  int32_t (*fusion_var_dtype)(nabla_fusion_context* c, const char* name);
  int64_t (*fusion_var_rank)(nabla_fusion_context* c, const char* name);
  int32_t (*fusion_var_dims)(nabla_fusion_context* c, const char* name, int64_t* dims);

  /* ---- Version 4: copies and variables */
  /* Makes output t a copy of src with storage of its own on device d
   * (src's shape and dtype), wherever src lives: host, d or another
   * device. */
  int32_t (*tensor_copy)(nabla_tensor* t, const nabla_tensor* src, nabla_device* d);
  /* The tensor of input slot[i] whether or not it holds data: a
   * NABLA_C_SLOT_NO_BUFFER input's shape and dtype, which stay when an
   * executor has released its buffer (kernel_input refuses a tensor without
   * data). NULL (an error naming the slot) when the input is absent. */
  const nabla_tensor* (*kernel_input_var)(nabla_kernel_context* c, const char* slot, size_t i);
  /* Marks input `slot`, declared before (op_input, or op_new_default_grad's
   * slots), NABLA_C_SLOT_NO_BUFFER. */
  int32_t (*op_input_no_buffer)(nabla_op_builder* b, const char* slot);

  /* ---- Version 4: program passes
   *
   * A rewrite an op brings for what a fusion chain cannot express
   * (docs/performance.md): after_backward 0, FuseOps runs it on programs
   * without their backward part (the fused ops bring their own gradients);
   * after_backward 1, FuseGradOps runs it once the backward part and the
   * optimizer are there (grad ops sharing work, a grad op taking over an
   * update). fn must leave every var the pass context keeps (pass_keep),
   * every persistable var and every result read later as it was, and only
   * change how the program computes them. name: what errors call it. */
  int32_t (*op_rewrites)(nabla_op_builder* b, int32_t after_backward, const char* name, nabla_pass_fn fn, void* user);
  /* The vars the pass must keep (fetched ones, say). */
  size_t (*pass_keep_count)(nabla_pass_context* c);
  const char* (*pass_keep)(nabla_pass_context* c, size_t i);
  /* The program: blocks 0 (the root) .. count - 1; *parent gets a block's
   * enclosing block, -1 for the root. */
  size_t (*pass_block_count)(nabla_pass_context* c);
  int32_t (*pass_block_parent)(nabla_pass_context* c, size_t block, int64_t* parent);
  /* A block's ops in execution order, read with the op_* functions. An op
   * pointer and the strings read from it are valid until the next edit of
   * the program (any pass_* function that changes it). */
  size_t (*pass_op_count)(nabla_pass_context* c, size_t block);
  const nabla_op* (*pass_op)(nabla_pass_context* c, size_t block, size_t i);
  /* Its position in the program's source (line, col 1-based; 0: unknown). */
  int32_t (*pass_op_pos)(nabla_pass_context* c, size_t block, size_t i, int32_t* line, int32_t* col);
  int32_t (*pass_op_set_pos)(nabla_pass_context* c, size_t block, size_t i, int32_t line, int32_t col);
  /* Edits op i of block: a slot's arguments (set or, with remove_slot, the
   * slot gone), an attribute (the value is copied), ... */
  int32_t (*pass_op_set_args)(nabla_pass_context* c, size_t block, size_t i, int32_t output, const char* slot,
                              const char* const* names, size_t n);
  int32_t (*pass_op_remove_slot)(nabla_pass_context* c, size_t block, size_t i, int32_t output, const char* slot);
  int32_t (*pass_op_set_attr)(nabla_pass_context* c, size_t block, size_t i, const char* name,
                              const nabla_attr_value* value);
  int32_t (*pass_op_remove_attr)(nabla_pass_context* c, size_t block, size_t i, const char* name);
  /* ... and its attributes the schema of its type has defaults for, where
   * it has none (refused for an unregistered type or a required attribute
   * left out, naming the op). */
  int32_t (*pass_op_fill_default_attrs)(nabla_pass_context* c, size_t block, size_t i);
  /* Inserts an op of `type` with no slots and no attributes before op
   * `index` (index = op count: at the end); ops from index on move up one. */
  int32_t (*pass_insert_op)(nabla_pass_context* c, size_t block, size_t index, const char* type);
  /* Removes ops [begin, end) of block. */
  int32_t (*pass_remove_ops)(nabla_pass_context* c, size_t block, size_t begin, size_t end);
  /* The vars of a block (its own, not its parents'), in declaration order. */
  size_t (*pass_var_count)(nabla_pass_context* c, size_t block);
  const char* (*pass_var_name)(nabla_pass_context* c, size_t block, size_t i);
  /* Fills *info (its struct_size set by the caller) for var `name` of the
   * block itself; NABLA_C_ERROR (not found) when the block has none. dims
   * stay valid until the next edit of the program. */
  int32_t (*pass_var_get)(nabla_pass_context* c, size_t block, const char* name, nabla_var_info* info);
  /* Sets var `name` of the block to *info, creating it when the block has
   * none (a new var: dense, as the program's own created vars are). */
  int32_t (*pass_var_set)(nabla_pass_context* c, size_t block, const char* name, const nabla_var_info* info);
  int32_t (*pass_remove_var)(nabla_pass_context* c, size_t block, const char* name);
  /* Whether an op type is registered (1, and *traits gets its
   * nabla_c_traits and *precision its nabla_c_precision when not NULL), or
   * not (0); -1 on error. Anywhere, not only in a pass. */
  int32_t (*op_type_traits)(const char* type, uint32_t* traits, int32_t* precision);
  /* Runs ops `ops` of block (n indices, ascending) once on the host in a
   * scratch scope and returns var's value, owned by the pass context until
   * the next call or the pass's end (read with the tensor_* functions): a
   * pass folding constants (flash_attn's causal-mask check). NULL (an error)
   * when an op is not constant, reading a var no earlier op of the list
   * writes (a feed, a parameter), drawing random numbers, owning a block or
   * running control flow, or when an op fails. */
  const nabla_tensor* (*pass_evaluate_on_host)(nabla_pass_context* c, size_t block, const size_t* ops, size_t n,
                                               const char* var);

  /* ---- Version 4: CPU row kernels
   *
   * The CPU backend's vectorised float32 kernels that nabla's softmax,
   * softmax_with_cross_entropy, layer_norm, flash_attn, sum and cast compute
   * with (sums in 16 lanes added in a fixed order, so results never depend
   * on the thread count): a plugin calling them gets those ops' bits. Host
   * memory; nothing is copied, so a kernel may call one per row. bfloat16
   * values are their bits (uint16_t, the top half of a float32). And what
   * the backend shares between the process's oneDNN calls. */
  /* *max = the largest of x[0, n), n >= 1. */
  int32_t (*cpu_row_max)(const float* x, int64_t n, float* max);
  /* y = exp(x - shift), exactly 0 where x - shift < -87 (and for x = -inf);
   * y may be x. sum not NULL: *sum = sum(y) (ExpShiftedSum; NULL:
   * ExpShifted, the same y). */
  int32_t (*cpu_exp_shifted)(const float* x, float shift, float* y, int64_t n, float* sum);
  /* y *= s. */
  int32_t (*cpu_scale_row)(float* y, float s, int64_t n);
  /* *dot = sum(a * b). */
  int32_t (*cpu_dot_row)(const float* a, const float* b, int64_t n, float* dot);
  /* softmax's gradient along a row: dx = y * (dy - sum(y * dy)). */
  int32_t (*cpu_softmax_grad_row)(const float* y, const float* dy, float* dx, int64_t n);
  /* layer_norm of one row of n >= 1: y = (x - mean) * rstd * scale + bias
   * (scale, bias may be NULL), rstd = 1 / sqrt(var + eps); writes the
   * row's mean and biased variance. */
  int32_t (*cpu_layer_norm_row)(const float* x, int64_t n, const float* scale, const float* bias, float eps, float* y,
                                float* mean, float* var);
  /* layer_norm's gradient for one row from its mean and rstd: xhat = (x -
   * mean) * rstd, g = dy * scale (or dy), dx = rstd * (g - mean(g) - xhat *
   * mean(g * xhat)) where dx is not NULL; adds dy * xhat to dscale and dy to
   * dbias where they are not NULL. */
  int32_t (*cpu_layer_norm_grad_row)(const float* x, const float* dy, int64_t n, float mean, float rstd,
                                     const float* scale, float* dx, float* dscale, float* dbias);
  /* y = xs[0] + ... + xs[count - 1] elementwise, added in that order;
   * count >= 1; y overlaps no input. */
  int32_t (*cpu_sum_arrays)(const float* const* xs, int64_t count, float* y, int64_t n);
  /* float32 -> bfloat16, rounded to nearest even (NaN stays NaN), and
   * bfloat16 -> float32 (exact). */
  int32_t (*cpu_to_bf16)(const float* x, uint16_t* y, int64_t n);
  int32_t (*cpu_from_bf16)(const uint16_t* x, float* y, int64_t n);
  /* For plugins that run oneDNN themselves (its library is the process's
   * one; nabla's convolutions and pooling do): what the CPU backend shares
   * between every oneDNN call. The calling thread's scratchpad, 64-byte
   * aligned, at least bytes, reused by the thread's next call; NULL only
   * after set_error (bytes 0 gets a buffer too). */
  void* (*cpu_dnnl_scratchpad)(size_t bytes);
  /* The thread budget of one oneDNN call (the executor's --threads, less
   * what other oneDNN calls hold now): begin sets *granted, the OpenMP
   * team size it set for the calling thread, and *budget, which end
   * returns once the call is done. */
  int32_t (*cpu_dnnl_budget_begin)(void** budget, int32_t* granted);
  int32_t (*cpu_dnnl_budget_end)(void* budget);
  /* *has = 1 where oneDNN runs bfloat16 GEMMs natively, else 0. */
  int32_t (*cpu_has_bf16_gemm)(int32_t* has);
  /* C = alpha * op(A) * op(B) + beta * C with bfloat16 A and B (their bits)
   * and float32 accumulation: the backend's bfloat16 GEMM (oneDNN's
   * matmul), shapes and leading dimensions as in cpu_gemm. c_dtype
   * NABLA_C_FLOAT32: C is float32; NABLA_C_BFLOAT16: C is bfloat16 (its
   * bits), rounded once, and beta must be 0 (C is only written). */
  int32_t (*cpu_gemm_bf16)(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, void* c,
                           int32_t c_dtype, int64_t ldc);

  /* ---- Version 5: variables, tensor arrays and var-type inference
   *
   * A nabla_var is a var of the scope a kernel runs in, valid for the
   * kernel call. Its tensor (var_tensor) and its entries (var_array_entry)
   * are nabla_tensor handles like kernel_output's: valid until the var's
   * type changes or the array is resized. Every function checks its
   * handles (NULL is an error naming the function) and fails with
   * NABLA_C_ERROR, NULL or -1 and a message (last_error). */
  /* The var of input (output 0) or output (output 1) slot[i]. An input's
   * var is read only: no var_set_type, var_array_resize, tensor_assign or
   * write to its tensors. NULL (an error naming the slot) when it is absent
   * or the arg is @EMPTY@. */
  nabla_var* (*kernel_var)(nabla_kernel_context* c, int32_t output, const char* slot, size_t i);
  /* Its nabla_c_var_type; -1 on error. */
  int32_t (*var_type)(const nabla_var* v);
  /* Sets what it holds; the other kinds' contents stay as they were (the
   * core's Variable keeps a tensor and an array side by side). */
  int32_t (*var_set_type)(nabla_var* v, int32_t type);
  /* Its tensor (a dense var's value), whatever its type. */
  nabla_tensor* (*var_tensor)(nabla_var* v);
  /* A tensor array's length; -1 (an error) for a var of another type. */
  int64_t (*var_array_size)(const nabla_var* v);
  /* Grows or shrinks a tensor array to n entries (new entries hold no
   * data; n at most 2^31). */
  int32_t (*var_array_resize)(nabla_var* v, size_t n);
  /* Entry i of a tensor array (i < its length). */
  nabla_tensor* (*var_array_entry)(nabla_var* v, size_t i);
  /* 1 when the tensor holds data (allocated, or shares a buffer), 0 when
   * not (a shape and dtype at most), -1 on error. */
  int32_t (*tensor_initialized)(const nabla_tensor* t);
  /* t = src: t shares src's buffer, shape and dtype, whether or not src
   * holds data; src NULL makes t an empty tensor (no data, no shape), so a
   * buffer t shared with others stays theirs. */
  int32_t (*tensor_assign)(nabla_tensor* t, const nabla_tensor* src);
  /* Var-type inference of the op (OpBuilder::InferVarType): see
   * nabla_infer_var_type_fn. */
  int32_t (*op_infer_var_type)(nabla_op_builder* b, nabla_infer_var_type_fn fn, void* user);
  /* A var's nabla_c_var_type in a pass context's block (-1 on error: no
   * such var), and setting it. */
  int32_t (*pass_var_type)(nabla_pass_context* c, size_t block, const char* name);
  int32_t (*pass_var_set_type)(nabla_pass_context* c, size_t block, const char* name, int32_t type);
  /* The nabla_c_var_type of input slot[i] (-1 on error), at build and at
   * run time. */
  int32_t (*infer_input_var_type)(nabla_infer_context* c, const char* slot, size_t i);

  /* ---- Version 5 (continued): the CPU backend's GEMM with a fused bias and activation
   * (fc). C = act(A * B + bias), row-major, A M x K, B K x N (neither
   * transposed), bias [N] added to every row (NULL: none), dtype
   * NABLA_C_FLOAT32 or NABLA_C_FLOAT64. C is cut into the blocks cpu_gemm
   * cuts it into; a float32 block that the library (lib, a
   * nabla_c_gemm_lib) gives to oneDNN, with a bias, is computed there whole,
   * bias and act (a nabla_c_gemm_act) as post-ops; every other block is
   * cpu_gemm's product of it, handed at once, on the same thread, to
   * epilogue(user, ...), which must add the bias and apply act itself (so
   * a fused op keeps the bits of the ops it replaces). M, N, K may be 0
   * (K = 0: the epilogue on zeros). */
  int32_t (*cpu_gemm_bias_act)(int32_t dtype, int32_t lib, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                               const void* b, int64_t ldb, const void* bias, int32_t act, void* c, int64_t ldc,
                               nabla_gemm_epilogue_fn epilogue, void* user);

  /* ---- Version 6: control flow: scopes, running blocks, block attributes
   *
   * What while and conditional_block need: a kernel runs a block of the
   * run's program in a child scope of its own, keeps such scopes in a
   * step_scopes var for its grad op, and reads the run's program and
   * options; a grad maker reads the grad block the backward builder made
   * for the op's block. A nabla_scope is a scope of the run, valid while
   * it lives (a child until scope_delete_child, the kernel's for the
   * call). */
  /* The scope the kernel runs in. */
  nabla_scope* (*kernel_scope)(nabla_kernel_context* c);
  /* A new, empty child scope of s, owned by s until scope_delete_child. */
  nabla_scope* (*scope_new_child)(nabla_scope* s);
  /* Deletes child, its vars and its own children, when it is a child of s;
   * anything else is left alone (child is not dereferenced then). */
  int32_t (*scope_delete_child)(nabla_scope* s, nabla_scope* child);
  /* Var `name` of s (local 1) or of s or an enclosing scope (local 0);
   * NULL when there is none, without an error (last_error says why NULL
   * came for a bad argument). */
  nabla_var* (*scope_find_var)(nabla_scope* s, const char* name, int32_t local);
  /* Var `name` of s itself, created (dense, no value) when it has none. */
  nabla_var* (*scope_var)(nabla_scope* s, const char* name);
  /* Runs block `block` of the run's program in scope s (the kernel's or a
   * scope under it) with the run's executor, device and options; an op's
   * failure comes back as NABLA_C_ERROR with its message. The kernel's op
   * must have NABLA_C_TRAIT_CONTROL_FLOW. */
  int32_t (*kernel_run_block)(nabla_kernel_context* c, int32_t block, nabla_scope* s);
  /* The run's program, read only: the pass_* functions that read (blocks,
   * ops, vars, pass_where) work on it, those that edit fail. NULL without
   * an error when the op was not started by an executor (an eager call,
   * opcheck). Valid for the kernel call. */
  nabla_pass_context* (*kernel_program)(nabla_kernel_context* c);
  /* The run's option `name` in *value: "max_loop_iterations", "threads"
   * or "seed"; the executors' defaults when the op was not started by an
   * executor. Another name is an error. */
  int32_t (*kernel_run_option)(nabla_kernel_context* c, const char* name, int64_t* value);
  /* The scopes a var keeps (a step_scopes var: while's StepScopes), in
   * order: how many (-1 on error), scope i, appending one, and keeping the
   * first n (the others are dropped from the list, not deleted: delete
   * them with scope_delete_child first). A grad op consumes the scopes of
   * its step_scopes input: these work on input vars too. */
  int64_t (*var_step_scope_count)(const nabla_var* v);
  nabla_scope* (*var_step_scope)(nabla_var* v, size_t i);
  int32_t (*var_step_scope_push)(nabla_var* v, nabla_scope* s);
  int32_t (*var_step_scopes_truncate)(nabla_var* v, size_t n);
  /* A var of no scope, owned by the caller until var_free (a running
   * gradient a kernel keeps between the steps of a block). */
  nabla_var* (*var_new)(void);
  void (*var_free)(nabla_var* v);
  /* *block = the index of block attribute `name` of op; an error when the
   * op has no such attribute or it is not a block. */
  int32_t (*op_get_block_attr)(const nabla_op* op, const char* name, int32_t* block);
  /* Where op came from in its program's YAML (1-based; 0 when unknown). */
  int32_t (*op_pos)(const nabla_op* op, int32_t* line, int32_t* col);
  /* A position of c's program as its messages name it ("file:line:col";
   * "" when the program has no file and pos is unknown). */
  const char* (*pass_where)(nabla_pass_context* c, int32_t line, int32_t col);
  /* The grad maker's view of the program being differentiated (read only,
   * as kernel_program's), and the index in it of the grad block the
   * backward builder made for the op's i-th block attribute, -1 on error. */
  nabla_pass_context* (*grad_program)(nabla_grad_context* c);
  int64_t (*grad_block)(nabla_grad_context* c, size_t i);

  /* ---- Version 7: what a kernel pays per call
   *
   * A kernel reads its op's attributes on every call, and some kernels copy
   * the op (for its type in messages, or the attributes a helper reads).
   * kernel_attr reads an attribute from what the executor prepared for the
   * op, the name given with its length (no strlen, no walk of the op's
   * attribute map); op_version lets a plugin keep what it derived from an
   * op (its copy) until the op changes. */
  /* Attribute `name` (name_len bytes; need not end in NUL) of the kernel's
   * op, as op_get_attr reads it: a missing attribute is an error naming it,
   * a block attribute is refused (op_get_block_attr reads it). */
  int32_t (*kernel_attr)(nabla_kernel_context* c, const char* name, size_t name_len, nabla_attr_value* out);
  /* A number unique in the process to op's type, slots and attributes: any
   * change renews it, a copy of the op carries it (its position in the
   * YAML, op_pos, is not part of it). 0 on error; never 0 otherwise. */
  uint64_t (*op_version)(const nabla_op* op);

  /* ---- Version 8: mixed precision across ops
   *
   * Under bfloat16 mixed precision with fusion, an op between two bfloat16
   * GEMMs (a bias and activation) runs its bfloat16 kernel on their
   * bfloat16 vars (nabla/mixed_precision.h: ElideBf16Casts), and a GEMM's
   * grad op may hand it a gradient in float32 (FoldBf16Casts). */
  /* Marks input `slot`, declared before (op_input, or op_new_default_grad's
   * slots), as one the op's bfloat16 kernel also takes in float32: the
   * kernel must read that input in either dtype. */
  int32_t (*op_bf16_takes_float32)(nabla_op_builder* b, const char* slot);

  /* ---- Version 9: CPU row kernels, many rows a call
   *
   * Version 4's row kernels take one row a call. A kernel over short rows
   * (layer_norm's rows of 128, flash_attn's tiles of 32 to 128 keys) paid a
   * call through this table per row, and the backend waited on each row's
   * reductions in turn. These take many rows a call, each row computed as
   * version 4's kernel computes it (the same bits); layer_norm's rows
   * interleave. Host memory, float32; rows of n >= 0 elements. */
  /* cpu_layer_norm_row for each of `rows` rows of n >= 1, x and y a row (n)
   * apart (y may be x); mean[r] and var[r] for row r. */
  int32_t (*cpu_layer_norm_rows)(const float* x, int64_t rows, int64_t n, const float* scale, const float* bias,
                                 float eps, float* y, float* mean, float* var);
  /* cpu_layer_norm_grad_row for each of `rows` rows of n (x, dy and dx a
   * row apart; dx may be x or dy, or NULL) with mean[r] and rstd[r]; dscale
   * and dbias (either may be NULL) take the rows in order. acc not NULL
   * (rows a row apart; dx not NULL): dx = acc + dx, each element added once
   * dx's is final, so a residual's gradient joins in the same pass; acc may
   * be dx, but overlap it no other way. */
  int32_t (*cpu_layer_norm_grad_rows)(const float* x, const float* dy, int64_t rows, int64_t n, const float* mean,
                                      const float* rstd, const float* scale, const float* acc, float* dx, float* dscale,
                                      float* dbias);
  /* max[r] = the largest of row r's first lens[r] elements (rows ld
   * apart), as cpu_row_max; -inf where lens[r] is 0. */
  int32_t (*cpu_row_max_rows)(const float* x, int64_t ld, int64_t rows, const int64_t* lens, float* max);
  /* Row r of y (rows ldy apart) = exp(x - shifts[r]) over row r of x's
   * first lens[r] elements (rows ldx apart), as cpu_exp_shifted, then zeros
   * up to `width`: 0 <= lens[r] <= width. sums not NULL: sums[r] = their
   * sum (0 for an empty row). y may be x (ldy = ldx). */
  int32_t (*cpu_exp_shifted_rows)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const int64_t* lens,
                                  int64_t width, const float* shifts, float* sums);
  /* dots[r] = cpu_dot_row of row r of a and of b, n elements each (rows lda
   * and ldb apart). */
  int32_t (*cpu_dot_rows)(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t n,
                          float* dots);
  /* Append new functions here, and raise NABLA_C_API_VERSION. */
} nabla_api;

/* What a plugin says about itself, read before anything of it is called. */
typedef struct nabla_plugin_manifest {
  uint32_t magic;           /* NABLA_C_PLUGIN_MAGIC */
  uint32_t api_version;     /* NABLA_C_API_VERSION it was built with */
  uint32_t api_struct_size; /* sizeof(nabla_api) it was built with: the slots it may call */
  uint32_t reserved;
  const char* name;    /* the plugin name */
  const char* version; /* the plugin's own version, "1.0" */
} nabla_plugin_manifest;

typedef int32_t (*nabla_plugin_init_fn)(const nabla_api* api, nabla_registrar* registrar);

#define NABLA_C_MANIFEST_SYMBOL "nabla_plugin_manifest_v1"
#define NABLA_C_INIT_SYMBOL "nabla_plugin_init"

#ifdef __cplusplus
#define NABLA_C_EXTERN extern "C"
#else
#define NABLA_C_EXTERN
#endif
#define NABLA_C_EXPORT NABLA_C_EXTERN __attribute__((visibility("default")))

/* A C plugin's identity and entry point:
 *   NABLA_C_PLUGIN("my_plugin", "1.0") {
 *     nabla_op_builder* b = api->op_new(registrar, "my_op", __FILE__, __LINE__);
 *     ...
 *     return NABLA_C_OK;
 *   }
 * The body sees `api` and `registrar`. */
#define NABLA_C_PLUGIN(plugin_name, plugin_version)                                                            \
  NABLA_C_EXPORT const nabla_plugin_manifest nabla_plugin_manifest_v1 = {                                      \
      NABLA_C_PLUGIN_MAGIC, NABLA_C_API_VERSION, (uint32_t)sizeof(nabla_api), 0, plugin_name, plugin_version}; \
  static int32_t nabla_c_plugin_register(const nabla_api* api, nabla_registrar* registrar);                    \
  NABLA_C_EXPORT int32_t nabla_plugin_init(const nabla_api* api, nabla_registrar* registrar) {                 \
    if (!api || api->struct_size < sizeof(nabla_api)) return NABLA_C_ERROR;                                    \
    return nabla_c_plugin_register(api, registrar);                                                            \
  }                                                                                                            \
  static int32_t nabla_c_plugin_register(const nabla_api* api, nabla_registrar* registrar)

#ifdef __cplusplus
}
#endif

#endif /* NABLA_C_API_H_ */
