// ParallelForRange: the one place kernels' parallel loops meet TBB.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "nabla/cpu/cpu.h"
#include "tsan_sync.h"

namespace nabla::cpu {

void ParallelForRange(int64_t n, int64_t grain, void (*body)(void*, int64_t, int64_t), void* ctx) {
  // An arena of one thread (--threads 1) gains nothing from chunks.
  if (tbb::this_task_arena::max_concurrency() <= 1) {
    body(ctx, 0, n);
    return;
  }
  ForkJoinSync sync;
  sync.Fork();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, static_cast<size_t>(grain)),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      sync.ChunkBegins();
                      body(ctx, r.begin(), r.end());
                      sync.ChunkEnds();
                    });
  sync.Joined();
}

}  // namespace nabla::cpu
