#pragma once
// What a keep-warm task (taskgraph_executor.cc) watches while it holds a TBB
// worker spinning: anything that puts new work into an arena, which the
// spinning worker would otherwise leave to the master alone.
#include <atomic>
#include <cstdint>

namespace nabla::cpu {

struct WorkSignal {
  std::atomic<uint64_t> epoch{0};  // bumped when a run or a parallel loop starts
  std::atomic<int> loops{0};       // parallel loops in flight
};

// One per process, shared by every executor and arena.
WorkSignal& GlobalWorkSignal();

// Marks a tbb::parallel_for in flight, for its whole duration: a keep-warm
// task that started after the loop did still lets its worker take chunks.
class ParallelLoopScope {
 public:
  ParallelLoopScope() {
    WorkSignal& s = GlobalWorkSignal();
    s.loops.fetch_add(1);
    s.epoch.fetch_add(1);
  }
  ~ParallelLoopScope() { GlobalWorkSignal().loops.fetch_sub(1); }
  ParallelLoopScope(const ParallelLoopScope&) = delete;
  ParallelLoopScope& operator=(const ParallelLoopScope&) = delete;
};

}  // namespace nabla::cpu
