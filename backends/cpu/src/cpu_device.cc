#include <tbb/scalable_allocator.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "nabla/block_pool.h"
#include "nabla/c_api_host.h"
#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"

namespace nabla::cpu {

// Under AddressSanitizer the C allocator (which ASan replaces) is asked for
// exactly the bytes wanted: tbbmalloc is not instrumented, and the rounding
// to 64 bytes would leave room for a write past a tensor's end that ASan
// would not see. posix_memalign, not aligned_alloc, because ASan holds
// aligned_alloc to C11's rule that the size be a multiple of the alignment.
// GCC defines __SANITIZE_ADDRESS__, clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define NABLA_CPU_EXACT_ALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NABLA_CPU_EXACT_ALLOC 1
#endif
#endif

void* CpuDevice::Allocate(size_t bytes) {
#if defined(NABLA_CPU_EXACT_ALLOC)
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes) != 0) p = nullptr;
#else
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
    // Small tensors (an eager op's output, a scalar loss) come from the
    // per-thread block lists: made and freed once per call, where even
    // tbbmalloc's path showed in the per-op cost.
#if !defined(__SANITIZE_THREAD__)
  if (rounded <= kMaxPooledBytes) return PoolAllocate(rounded);
#endif
    // tbbmalloc keeps freed blocks in per-thread pools, so the buffers a step
    // frees are handed back to the next step without touching the OS. Under
    // ThreadSanitizer the C allocator is used instead: tbbmalloc is not
    // instrumented, so TSan would not see a block freed on one thread and
    // reused on another, and would report the reuse as a race.
#if defined(__SANITIZE_THREAD__)
  void* p = std::aligned_alloc(64, rounded);
#else
  void* p = scalable_aligned_malloc(rounded, 64);
#endif
#endif
  NABLA_ENFORCE(p != nullptr, kExternal, "out of host memory allocating ", bytes, " bytes");
  return p;
}

void CpuDevice::Free(void* ptr, size_t bytes) {
#if defined(__SANITIZE_THREAD__) || defined(NABLA_CPU_EXACT_ALLOC)
  (void)bytes;
  std::free(ptr);
#else
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  if (rounded <= kMaxPooledBytes) return PoolFree(ptr, rounded);
  scalable_aligned_free(ptr);
#endif
}

void CpuDevice::CopyFromHost(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuDevice::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuDevice::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

void RegisterSequentialExecutor();  // sequential_executor.cc
void RegisterTaskGraphExecutor();   // taskgraph_executor.cc

void InitCpuBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CpuDevice host;
    SetHostDevice(&host);
    // GEMMs split across the executor's arena (blas.cc); OpenBLAS's own
    // threads would come on top of it.
    SetBlasThreads(1);
    RegisterSequentialExecutor();
    RegisterTaskGraphExecutor();
    DeviceBackend backend;
    backend.enumerate = [] {
      return std::vector<DeviceListing>{{"cpu", {StrCat("the host (OpenBLAS kernels: ", BlasCoreName(), ")")}, true}};
    };
    backend.open = [](int index) -> Device& {
      NABLA_ENFORCE(index <= 0, kNotFound, "no device cpu:", index, "; the host is cpu (or cpu:0)");
      return HostDevice();
    };
    RegisterDeviceBackend("cpu", std::move(backend));
    // C ABI plugins' parallel loops share the executor's arena with the C++
    // plugins' ones, through ParallelFor itself: small loops run in place
    // and the split is the same.
    SetCApiParallelFor([](int64_t n, int64_t grain, nabla_range_fn body, void* user) {
      ParallelFor(n, grain, [body, user](int64_t b, int64_t e) { body(user, b, e); });
    });
    // ... and compute with the GEMM and vector math nabla's own kernels use.
    CApiCpuMath math{};
    math.gemm_f32 = [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                       const float* b, int64_t ldb, float beta, float* c,
                       int64_t ldc) { Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); };
    math.gemm_f64 = [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                       const double* b, int64_t ldb, double beta, double* c,
                       int64_t ldc) { Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); };
    math.vmath = [](int32_t fn, const float* x, float* y, int64_t n) {
      if (fn == NABLA_C_VMATH_TANH) {
        Tanh(x, y, n);
      } else {
        Gelu(x, y, n, fn == NABLA_C_VMATH_GELU_TANH);
      }
    };
    math.gelu_grad = [](const float* x, const float* dy, float* dx, int64_t n, bool approximate) {
      GeluGrad(x, dy, dx, n, approximate);
    };
    math.row_max = RowMax;
    math.exp_shifted = ExpShifted;
    math.exp_shifted_sum = ExpShiftedSum;
    math.scale_row = ScaleRow;
    math.dot_row = DotRow;
    math.softmax_grad_row = SoftmaxGradRow;
    math.layer_norm_row = LayerNormRow;
    math.layer_norm_grad_row = LayerNormGradRow;
    math.layer_norm_rows = LayerNormRows;
    math.layer_norm_grad_rows = LayerNormGradRows;
    math.row_max_rows = RowMaxRows;
    math.exp_shifted_rows = ExpShiftedRows;
    math.dot_rows = DotRows;
    math.sum_arrays = SumArrays;
    // bfloat16 is its 16 bits (a struct of one uint16_t) on both sides.
    static_assert(sizeof(bfloat16) == sizeof(uint16_t) && alignof(bfloat16) == alignof(uint16_t));
    math.to_bf16 = [](const float* x, uint16_t* y, int64_t n) { ConvertToBf16(x, reinterpret_cast<bfloat16*>(y), n); };
    math.from_bf16 = [](const uint16_t* x, float* y, int64_t n) {
      ConvertFromBf16(reinterpret_cast<const bfloat16*>(x), y, n);
    };
    math.dnnl_scratchpad = DnnlScratchpad;
    math.dnnl_budget_begin = [](int32_t* granted) -> void* {
      auto* budget = new DnnlThreadBudget;
      *granted = budget->Granted();
      return budget;
    };
    math.dnnl_budget_end = [](void* budget) { delete static_cast<DnnlThreadBudget*>(budget); };
    math.has_bf16_gemm = HasBf16Gemm;
    math.gemm_bf16_f32 = [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                            int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
      GemmBf16(ta, tb, m, n, k, alpha, reinterpret_cast<const bfloat16*>(a), lda, reinterpret_cast<const bfloat16*>(b),
               ldb, beta, c, ldc);
    };
    math.gemm_bf16_bf16 = [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                             int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc) {
      GemmBf16(ta, tb, m, n, k, alpha, reinterpret_cast<const bfloat16*>(a), lda, reinterpret_cast<const bfloat16*>(b),
               ldb, reinterpret_cast<bfloat16*>(c), ldc);
    };
    // GemmAct's values are nabla_c_gemm_act's, in the same order.
    static_assert(static_cast<int>(GemmAct::kRelu) == NABLA_C_GEMM_ACT_RELU &&
                  static_cast<int>(GemmAct::kTanh) == NABLA_C_GEMM_ACT_TANH &&
                  static_cast<int>(GemmAct::kSigmoid) == NABLA_C_GEMM_ACT_SIGMOID);
    math.gemm_bias_act_f32 = [](int32_t lib, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                                const float* b, int64_t ldb, const float* bias, int32_t act, float* c, int64_t ldc,
                                nabla_gemm_epilogue_fn epilogue, void* ctx) {
      const GemmLib forced = lib == NABLA_C_GEMM_LIB_ONEDNN ? GemmLib::kOneDnn : GemmLib::kOpenBlas;
      GemmBiasAct(lib == NABLA_C_GEMM_LIB_POLICY ? nullptr : &forced, m, n, k, a, lda, b, ldb, bias,
                  static_cast<GemmAct>(act), c, ldc, epilogue, ctx);
    };
    math.gemm_bias_act_f64 = [](int32_t lib, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                                const double* b, int64_t ldb, const double* bias, int32_t act, double* c, int64_t ldc,
                                nabla_gemm_epilogue_fn epilogue, void* ctx) {
      const GemmLib forced = lib == NABLA_C_GEMM_LIB_ONEDNN ? GemmLib::kOneDnn : GemmLib::kOpenBlas;
      GemmBiasAct(lib == NABLA_C_GEMM_LIB_POLICY ? nullptr : &forced, m, n, k, a, lda, b, ldb, bias,
                  static_cast<GemmAct>(act), c, ldc, epilogue, ctx);
    };
    SetCApiCpuMath(math);
  });
}

}  // namespace nabla::cpu
