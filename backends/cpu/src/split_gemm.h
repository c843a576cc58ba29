#pragma once
// Splits one GEMM into blocks of C, one per thread of the calling task arena,
// each a single-threaded product run by tbb::parallel_for: how every GEMM of
// the CPU backend (float32 on OpenBLAS or oneDNN, bfloat16 on oneDNN) uses
// more than one core. Private to the CPU backend.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdint>

#include "tsan_sync.h"

namespace nabla::cpu {

// Below this many multiply-adds a GEMM runs in one piece: about 20 us on one
// core with the SkylakeX kernels, where a split costs more than it gains.
inline constexpr double kSplitMacs = 2.0 * 1024 * 1024;
// Block edges are multiples of the kernels' register blocking.
inline constexpr int64_t kSplitAlign = 16;

// Row-major C = op(A) * op(B) (+ beta * C, as `call` does it) cut along the
// longer edge of C, or with `rows_only` into blocks of rows (whole rows of C
// stay dense); `call(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)`
// computes one block.
template <typename T, typename TC, typename Call>
void SplitGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
               int64_t ldb, TC* c, int64_t ldc, Call&& call, bool rows_only = false) {
  const int threads = tbb::this_task_arena::max_concurrency();
  const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool by_cols = !rows_only && n >= m;
  const int64_t edge = by_cols ? n : m;
  int64_t parts = std::min<int64_t>(threads, edge / kSplitAlign);
  if (threads <= 1 || macs < kSplitMacs || parts <= 1) {
    call(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    return;
  }
  const int64_t step = (edge / parts + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  parts = (edge + step - 1) / step;
  ForkJoinSync sync;
  sync.Fork();
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, parts, 1),
      [&](const tbb::blocked_range<int64_t>& r) {
        sync.ChunkBegins();
        for (int64_t p = r.begin(); p < r.end(); ++p) {
          const int64_t lo = p * step, len = std::min(edge, lo + step) - lo;
          if (by_cols) {  // columns [lo, lo + len) of op(B) and C
            call(trans_a, trans_b, m, len, k, a, lda, trans_b ? b + lo * ldb : b + lo, ldb, c + lo, ldc);
          } else {  // rows [lo, lo + len) of op(A) and C
            call(trans_a, trans_b, len, n, k, trans_a ? a + lo : a + lo * lda, lda, b, ldb, c + lo * ldc, ldc);
          }
        }
        sync.ChunkEnds();
      },
      tbb::simple_partitioner());
  sync.Joined();
}

}  // namespace nabla::cpu
