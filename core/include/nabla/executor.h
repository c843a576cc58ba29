#pragma once
// Executors run one block of a program over a Scope on a Device. The core
// holds the interface and the per-op dispatch; backends provide executors and
// register them by name ("sequential", "taskgraph").
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

class Device;
class Executor;
class Scope;

struct ExecutorOptions {
  int threads = 0;          // 0: all cores
  uint64_t seed = 0;        // base for ops whose `seed` attribute is 0
  int64_t max_loop_iterations = 1000000;
};

// Per-run state kernels may read through ExecutionContext::Run().
struct RunContext {
  const ProgramDesc* program = nullptr;  // non-owning
  Executor* executor = nullptr;          // non-owning
  const ExecutorOptions* options = nullptr;
  uint64_t run_index = 0;  // counts top-level runs; varies random ops per step
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
  virtual void Run(const ProgramDesc& program, int block_idx, Scope& scope) = 0;
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
