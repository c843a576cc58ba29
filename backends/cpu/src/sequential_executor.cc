// The reference executor: ops one after another, in program order.
#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/scope.h"

namespace nabla::cpu {
namespace {

class SequentialExecutor final : public Executor {
 public:
  SequentialExecutor(Device& device, const ExecutorOptions& options) : device_(device), options_(options) {}
  std::string Name() const override { return "sequential"; }
  Device& GetDevice() const override { return device_; }
  const ExecutorOptions& Options() const override { return options_; }

  void Run(const ProgramDesc& program, int block_idx, Scope& scope) override {
    RunContext run{&program, this, &options_, run_counter_++};
    const BlockDesc* block = program.Block(block_idx);
    for (const auto& op : block->AllOps()) RunOp(*op, scope, device_, run);
  }

 private:
  Device& device_;
  ExecutorOptions options_;
  uint64_t run_counter_ = 0;
};

}  // namespace

void RegisterSequentialExecutor() {
  RegisterExecutor("sequential", [](Device& d, const ExecutorOptions& o) -> std::unique_ptr<Executor> {
    return std::make_unique<SequentialExecutor>(d, o);
  });
}

}  // namespace nabla::cpu
