#pragma once
// How the CPU backend's cached oneDNN matmuls (float32 in gemm_dnnl.cc,
// bfloat16 in gemm_bf16.cc) compute C = alpha * op(A) * op(B) + beta * C.
// Private to the CPU backend; only in builds with oneDNN.
#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>

namespace nabla::cpu {

// alpha is never part of a primitive: a learning rate that changes every
// step (mul_grad applying sgd) would make one per step. It is read at run
// time, by whichever of two forms oneDNN has a fast kernel for: a binary
// post-op multiplying by a one-element tensor (keeps the brgemm kernels; the
// run-time output scale sends a dense product to gemm:jit, 82-87 against
// 99-103 GFLOP/s on a 784x512x128 weight gradient here), or the run-time
// output scale (what gemm:jit takes, the only kernel for a strided block of
// C, where a binary post-op falls to the reference kernel, 1000x slower).
enum class AlphaBy { kOne, kBinaryPostOp, kOutputScale };

struct MatmulChoice {
  dnnl::matmul::primitive_desc pd;
  AlphaBy alpha = AlphaBy::kOne;
  // oneDNN offers only its reference kernel (ref:any) for this product:
  // callers compute it another way.
  bool reference = false;
};

// The primitive desc for row-major a, b, c with a user scratchpad, beta as
// a sum post-op, and, where `scaled`, alpha in the first form above that is
// not the reference kernel.
MatmulChoice ChooseMatmul(const dnnl::memory::desc& a, const dnnl::memory::desc& b, const dnnl::memory::desc& c,
                          bool scaled, float beta);

// Adds alpha's run-time argument (pointing at *alpha) for `by` to `args`.
void AddAlphaArg(AlphaBy by, float* alpha, std::unordered_map<int, dnnl::memory>& args);

}  // namespace nabla::cpu
