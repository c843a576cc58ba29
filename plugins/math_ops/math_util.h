#pragma once
// What the math_ops op files share beyond the op kit (nabla/opkit): the kit
// itself, pulled into this plugin's namespace, and GemmAnySize.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/opkit.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::math_ops {

using namespace nabla::opkit;  // NOLINT: every op file here builds on the kit

// ---------------------------------------------------------------- GEMM

// cpu::Gemm for possibly empty matrices: BLAS rejects leading dimensions of 0,
// and a product over k == 0 is beta * C.
template <typename T>
void GemmAnySize(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  cpu::Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace nabla::math_ops
