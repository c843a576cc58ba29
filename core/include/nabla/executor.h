#pragma once
// Executors run one block of a program over a Scope on a Device. The core
// holds the interface and the per-op dispatch; backends provide executors and
// register them by name ("sequential", "taskgraph").
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

class Device;
class Executor;
class Scope;

struct ExecutorOptions {
  int threads = 0;    // 0: all cores
  uint64_t seed = 0;  // base for ops whose `seed` attribute is 0
  int64_t max_loop_iterations = 1000000;
};

// What a caller says about one run (Executor::Run).
struct RunOptions {
  // The index that random ops whose `seed` is 0 mix into their seed
  // (ExecutionContext::Seed). Unset, a top-level run takes the executor's
  // next run number (counting from 0 the top-level runs given none: `nabla
  // exec --repeat`, Python's Executor.run). A caller that numbers its runs
  // itself sets it (the counter then stays where it is), so the draws
  // follow that number alone: the trainer gives a training step its step
  // number, which a resumed run reaches again and which evaluation runs in
  // between do not move.
  std::optional<uint64_t> random_index;
  // Also mixed in where non-zero: the data-parallel rank, so that each rank
  // draws its own masks for its own rows (0: one process, whose draws it
  // leaves as they were).
  uint64_t random_stream = 0;
};

// Per-run state kernels may read through ExecutionContext::Run().
struct RunContext {
  const ProgramDesc* program = nullptr;  // non-owning
  Executor* executor = nullptr;          // non-owning
  const ExecutorOptions* options = nullptr;
  // RunOptions::random_index, or the executor's count of top-level runs; a
  // nested run (a control-flow op's sub-block) gets its parent run's.
  uint64_t run_index = 0;
  uint64_t random_stream = 0;  // RunOptions::random_stream, inherited likewise
  // Eager calls: an op without a kernel for the device runs its cpu kernel
  // on host copies, and its results go back to the device (a program's
  // outputs go back only to vars that lived there).
  bool outputs_on_device = false;
};

class NABLA_API Executor {
 public:
  virtual ~Executor();
  virtual std::string Name() const = 0;
  virtual Device& GetDevice() const = 0;
  virtual const ExecutorOptions& Options() const = 0;
  // Runs block `block_idx` in `scope`; output vars missing from the scope
  // chain are created in `scope`. An op failure is rethrown with the op's
  // type, index and source position.
  void Run(const ProgramDesc& program, int block_idx, Scope& scope) { Run(program, block_idx, scope, RunOptions{}); }
  virtual void Run(const ProgramDesc& program, int block_idx, Scope& scope, const RunOptions& options) = 0;
};

struct PreparedOp;
class OpRegistry;

// The ops of one block with their registry entries, kernels and variables
// resolved once for one scope (output vars are created here), so a step does
// no name lookups. Valid while Matches() holds.
class NABLA_API PreparedBlock {
 public:
  PreparedBlock(const ProgramDesc& program, int block_idx, Scope& scope);
  ~PreparedBlock();
  PreparedBlock(const PreparedBlock&) = delete;
  PreparedBlock& operator=(const PreparedBlock&) = delete;

  size_t Size() const { return ops_.size(); }
  const OpDesc& Op(size_t i) const;
  // Runs op i exactly as RunOp would.
  void Run(size_t i, Device& device, const RunContext& run) const;
  bool Matches(const ProgramDesc& program, int block_idx, const Scope& scope) const;
  // Whether `block` holds the ops prepared, each unchanged since.
  bool SameOps(const BlockDesc& block) const;

 private:
  const ProgramDesc* program_;
  int block_idx_;
  Scope* scope_;  // non-owning
  // The scope's Id() and Generation() when prepared: the address alone may
  // be a new scope's (a fresh scope per eval batch or loop step).
  uint64_t scope_id_;
  uint64_t scope_generation_;
  // Each op and its OpDesc::Version() when prepared: an op added, removed,
  // renamed or re-attributed since makes the block stale.
  std::vector<std::pair<const OpDesc*, uint64_t>> op_versions_;
  std::shared_ptr<const OpRegistry> registry_;
  std::vector<std::unique_ptr<PreparedOp>> ops_;
};

// Runs one op: runtime shape inference, kernel lookup by (device, dtype),
// the kernel. Executors call this; errors name the op.
NABLA_API void RunOp(const OpDesc& op, Scope& scope, Device& device, const RunContext& run);

using ExecutorFactory = std::function<std::unique_ptr<Executor>(Device&, const ExecutorOptions&)>;
NABLA_API void RegisterExecutor(const std::string& name, ExecutorFactory factory);
// Throws InvalidArgument listing the registered names.
NABLA_API std::unique_ptr<Executor> CreateExecutor(const std::string& name, Device& device,
                                                   const ExecutorOptions& options = {});
NABLA_API std::vector<std::string> ExecutorNames();

// The startup program: one init op per persistable var of `main` that has an
// `init:` spec and is not in `skip` (e.g. fed). Init ops write slot `Out` and
// receive the var's `shape` and `dtype` as attributes.
NABLA_API ProgramDesc BuildStartupProgram(const ProgramDesc& main, const std::vector<std::string>& skip = {});

}  // namespace nabla
