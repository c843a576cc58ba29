#pragma once
// How many ops the task-graph executor is running at this moment, process
// wide. Each holds an arena thread, so DnnlThreadBudget gives a oneDNN call's
// OpenMP team only the threads no other op holds: a convolution running
// beside another op would otherwise start a second thread on top of the
// two the arena already has busy (--threads 2 running three).
#include <atomic>

namespace nabla::cpu {

std::atomic<int>& RunningOps();

// Counts the op running on this thread for as long as it lives.
class RunningOp {
 public:
  RunningOp() { RunningOps().fetch_add(1, std::memory_order_relaxed); }
  ~RunningOp() { RunningOps().fetch_sub(1, std::memory_order_relaxed); }
  RunningOp(const RunningOp&) = delete;
  RunningOp& operator=(const RunningOp&) = delete;
};

}  // namespace nabla::cpu
