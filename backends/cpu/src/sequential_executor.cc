// The reference executor: ops one after another, in program order.
#include <tbb/task_arena.h>

#include <map>
#include <memory>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/scope.h"

namespace nabla::cpu {
namespace {

class SequentialExecutor final : public Executor {
 public:
  SequentialExecutor(Device& device, const ExecutorOptions& options)
      : device_(device),
        options_(options),
        arena_(options.threads > 0 ? options.threads : tbb::task_arena::automatic) {}
  std::string Name() const override { return "sequential"; }
  Device& GetDevice() const override { return device_; }
  const ExecutorOptions& Options() const override { return options_; }

  using Executor::Run;
  void Run(const ProgramDesc& program, int block_idx, Scope& scope, const RunOptions& options) override {
    // Top-level runs reuse a preparation; nested runs (a loop body, once per
    // iteration in a fresh scope) would only pay to prepare, so they look up.
    thread_local int depth = 0;
    const uint64_t index = options.random_index ? *options.random_index : depth == 0 ? run_counter_++ : 0;
    RunContext run{&program, this, &options_, index, options.random_stream};
    if (depth > 0) {
      for (const auto& op : program.Block(block_idx)->AllOps()) RunOp(*op, scope, device_, run);
      return;
    }
    auto& prepared = prepared_[{&program, block_idx}];
    if (!prepared || !prepared->Matches(program, block_idx, scope))
      prepared = std::make_unique<PreparedBlock>(program, block_idx, scope);
    ++depth;
    struct DepthGuard {
      int& d;
      ~DepthGuard() { --d; }
    } guard{depth};
    // Ops run one by one on the calling thread, inside an arena of
    // --threads threads so that kernels' parallel loops keep to it.
    arena_.execute([&] {
      for (size_t i = 0; i < prepared->Size(); ++i) prepared->Run(i, device_, run);
    });
  }

 private:
  Device& device_;
  ExecutorOptions options_;
  tbb::task_arena arena_;
  uint64_t run_counter_ = 0;  // top-level runs given no RunOptions::random_index
  std::map<std::pair<const ProgramDesc*, int>, std::unique_ptr<PreparedBlock>> prepared_;
};

}  // namespace

void RegisterSequentialExecutor() {
  RegisterExecutor("sequential", [](Device& d, const ExecutorOptions& o) -> std::unique_ptr<Executor> {
    return std::make_unique<SequentialExecutor>(d, o);
  });
}

}  // namespace nabla::cpu
