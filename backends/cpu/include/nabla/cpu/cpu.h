#pragma once
// The CPU backend: the host device, GEMM on OpenBLAS, and the executors.
// InitCpuBackend() installs the host device and registers the executors; the
// app and tests call it once before running anything.
#include <cstdint>
#include <string>

#include "nabla/device.h"
#include "nabla/export.h"

namespace nabla::cpu {

// Idempotent.
NABLA_API void InitCpuBackend();

// Host memory, 64-byte aligned.
class NABLA_API CpuDevice final : public Device {
 public:
  DeviceType Type() const override { return DeviceType::kCPU; }
  std::string Name() const override { return "cpu"; }
  void* Allocate(size_t bytes) override;
  void Free(void* ptr, size_t bytes) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
};

// Row-major C = alpha * op(A) * op(B) + beta * C, op(A) is M x K, op(B) K x N.
// Leading dimensions are those of the stored (untransposed) matrices.
NABLA_API void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
NABLA_API void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                    int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// y = tanh(x) elementwise, float32, vectorized (a few ulp from std::tanh);
// x and y may be the same buffer. Kernels that compute tanh call this so
// fused and unfused programs agree bit for bit.
NABLA_API void Tanh(const float* x, float* y, int64_t n);

// The GEMM kernel OpenBLAS chose ("SkylakeX", "Prescott", ...).
NABLA_API std::string BlasCoreName();
NABLA_API void SetBlasThreads(int threads);

}  // namespace nabla::cpu
