#pragma once
// The core's side of the C ABI that backends fill in (nabla/c_api.h is the
// plugins' side).
#include <cstdint>

#include "nabla/c_api.h"
#include "nabla/export.h"

namespace nabla {

// The C ABI's parallel_for runs chunks through `fn` when set: the CPU
// backend sets it to its executor-arena loop; until then chunks run inline.
using CApiParallelFor = void (*)(int64_t n, int64_t grain, nabla_range_fn body, void* user);
NABLA_API void SetCApiParallelFor(CApiParallelFor fn);

// The C ABI's CPU math (cpu_gemm, cpu_vmath, cpu_gelu_grad; version 4's
// row kernels) calls these, which the CPU backend sets (the core has no
// math); arguments arrive checked. Until then those functions fail naming
// the missing backend.
struct CApiCpuMath {
  void (*gemm_f32)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
  void (*gemm_f64)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                   int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);
  void (*vmath)(int32_t fn, const float* x, float* y, int64_t n);  // fn: a nabla_c_vmath_fn
  void (*gelu_grad)(const float* x, const float* dy, float* dx, int64_t n, bool approximate);
  // Version 4: nabla/cpu/vmath.h's row kernels, SumArrays and the bfloat16
  // conversions (bfloat16 as its bits).
  float (*row_max)(const float* x, int64_t n);
  void (*exp_shifted)(const float* x, float shift, float* y, int64_t n);
  float (*exp_shifted_sum)(const float* x, float shift, float* y, int64_t n);
  void (*scale_row)(float* y, float s, int64_t n);
  float (*dot_row)(const float* a, const float* b, int64_t n);
  void (*softmax_grad_row)(const float* y, const float* dy, float* dx, int64_t n);
  void (*layer_norm_row)(const float* x, int64_t n, const float* scale, const float* bias, float eps, float* y,
                         float* mean, float* var);
  void (*layer_norm_grad_row)(const float* x, const float* dy, int64_t n, float mean, float rstd, const float* scale,
                              float* dx, float* dscale, float* dbias);
  void (*sum_arrays)(const float* const* xs, int64_t count, float* y, int64_t n);
  void (*to_bf16)(const float* x, uint16_t* y, int64_t n);
  void (*from_bf16)(const uint16_t* x, float* y, int64_t n);
  // nabla/cpu/cpu.h's DnnlScratchpad, a new DnnlThreadBudget (its Granted
  // in *granted; dnnl_budget_end deletes it) and HasBf16Gemm.
  void* (*dnnl_scratchpad)(size_t bytes);
  void* (*dnnl_budget_begin)(int32_t* granted);
  void (*dnnl_budget_end)(void* budget);
  bool (*has_bf16_gemm)();
  // nabla/cpu/cpu.h's two GemmBf16 (C float32, or bfloat16 as its bits).
  void (*gemm_bf16_f32)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                        int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);
  void (*gemm_bf16_bf16)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                         int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc);
  // Version 5: nabla/cpu/cpu.h's two GemmBiasAct; lib a nabla_c_gemm_lib
  // (NABLA_C_GEMM_LIB_POLICY: no forced library), act a nabla_c_gemm_act.
  void (*gemm_bias_act_f32)(int32_t lib, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                            int64_t ldb, const float* bias, int32_t act, float* c, int64_t ldc,
                            nabla_gemm_epilogue_fn epilogue, void* ctx);
  void (*gemm_bias_act_f64)(int32_t lib, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                            int64_t ldb, const double* bias, int32_t act, double* c, int64_t ldc,
                            nabla_gemm_epilogue_fn epilogue, void* ctx);
  // Version 9: nabla/cpu/vmath.h's rows kernels.
  void (*layer_norm_rows)(const float* x, int64_t rows, int64_t n, const float* scale, const float* bias, float eps,
                          float* y, float* mean, float* var);
  void (*layer_norm_grad_rows)(const float* x, const float* dy, int64_t rows, int64_t n, const float* mean,
                               const float* rstd, const float* scale, const float* acc, float* dx, float* dscale,
                               float* dbias);
  void (*row_max_rows)(const float* x, int64_t ld, int64_t rows, const int64_t* lens, float* out);
  void (*exp_shifted_rows)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const int64_t* lens,
                           int64_t width, const float* shifts, float* sums);
  void (*dot_rows)(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t n, float* dots);
};
NABLA_API void SetCApiCpuMath(const CApiCpuMath& hooks);

}  // namespace nabla
