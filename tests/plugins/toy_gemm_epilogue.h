#pragma once
// toy_gemm_bias_act's epilogue (tests/plugins/toy_sdk_cpu_math.cc),
// compiled twice: in the plugin against the C ABI SDK and in c_abi_test
// against nabla's own cpu::GemmBiasAct, which must agree bit for bit. Adds
// the bias and applies the activation (cpu::GemmAct's, by its number) to a
// block of C; `fail` makes it throw, for the error path. Internal linkage,
// so neither binary's copy stands in for the other's.
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace nabla::toy {
namespace {

template <typename T>
struct BiasActEpilogue {
  T* c;
  int64_t ldc;
  const T* bias;  // null: none
  int act;        // 0 identity, 1 relu, 2 tanh, 3 sigmoid
  bool fail;
  static void Run(void* self, int64_t row, int64_t col, int64_t rows, int64_t cols) {
    const BiasActEpilogue& e = *static_cast<const BiasActEpilogue*>(self);
    if (e.fail) throw std::runtime_error("toy epilogue failed");
    for (int64_t r = row; r < row + rows; ++r)
      for (int64_t j = col; j < col + cols; ++j) {
        T& o = e.c[r * e.ldc + j];
        if (e.bias) o += e.bias[j];
        if (e.act == 1) o = o > T(0) ? o : T(0);
        if (e.act == 2) o = std::tanh(o);
        if (e.act == 3) o = T(1) / (T(1) + std::exp(-o));
      }
  }
};

}  // namespace
}  // namespace nabla::toy
