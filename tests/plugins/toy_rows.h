#pragma once
// toy_rows' work on one row (tests/plugins/toy_sdk_cpu_math.cc), compiled
// twice: in the plugin against the C ABI SDK (nabla/cpu/vmath.h's shim) and
// in c_abi_test against nabla's own cpu:: functions, which must agree bit
// for bit. Include nabla/cpu/cpu.h and nabla/cpu/vmath.h first. Internal
// linkage, so neither binary's copy stands in for the other's.
#include <cstdint>
#include <thread>
#include <vector>

namespace nabla::toy {
namespace {

// Row r of toy_rows: x, y its rows of X and Y, y2 Y's next row (wrapping),
// out its row of Out [rows, 2 n + 3] (fn 10 writes 3 values, also at n = 0), acc Acc [2, n] (fn 7, whose rows run
// in order, adds dscale and dbias there; fn 10's rows run in order too).
inline void RowRun(int fn, float shift, const float* x, const float* y, const float* y2, int64_t n, float* out,
                   float* acc) {
  switch (fn) {
    case 0:
      out[0] = cpu::RowMax(x, n);
      break;
    case 1:
      cpu::ExpShifted(x, shift, out, n);
      break;
    case 2:
      out[n] = cpu::ExpShiftedSum(x, shift, out, n);
      break;
    case 3:
      for (int64_t i = 0; i < n; ++i) out[i] = x[i];
      cpu::ScaleRow(out, shift, n);
      break;
    case 4:
      out[0] = cpu::DotRow(x, y, n);
      break;
    case 5:
      cpu::SoftmaxGradRow(x, y, out, n);
      break;
    case 6:
      cpu::LayerNormRow(x, n, y, y2, 1e-5f, out, out + n, out + n + 1);
      break;
    case 7:
      cpu::LayerNormGradRow(x, y, n, 0.25f, 1.5f, y2, out, acc, acc + n);
      break;
    case 8: {
      const float* xs[3] = {x, y, y2};
      cpu::SumArrays(xs, 3, out, n);
      break;
    }
    case 9: {  // out[0, n): X's bfloat16 bits; out[n, 2 n): Y through bfloat16 and back
      std::vector<bfloat16> b(n);
      cpu::ConvertToBf16(x, b.data(), n);
      for (int64_t i = 0; i < n; ++i) out[i] = b[i].bits;
      cpu::ConvertToBf16(y, b.data(), n);
      cpu::ConvertFromBf16(b.data(), out + n, n);
      break;
    }
    case 10: {  // oneDNN's shared state: out[0] HasBf16Gemm, out[1] a budget's team, out[2] a 64-byte aligned
                // scratchpad, and no error for none of 0 bytes on a thread that has none yet (NULL then; a
                // primitive without scratchpad asks so)
      cpu::DnnlThreadBudget budget;
      out[0] = cpu::HasBf16Gemm() ? 1.0f : 0.0f;
      out[1] = static_cast<float>(budget.Granted());
      bool zero_ok = false;
      std::thread([&zero_ok] {
        try {
          cpu::DnnlScratchpad(0);
          zero_ok = true;
        } catch (...) {
        }
      }).join();
      out[2] = zero_ok && reinterpret_cast<uintptr_t>(cpu::DnnlScratchpad(64 * (n + 1))) % 64 == 0 ? 1.0f : 0.0f;
      break;
    }
    default:
      break;
  }
}

}  // namespace
}  // namespace nabla::toy
