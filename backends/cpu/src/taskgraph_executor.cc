// The task-graph executor: one tbb::flow::graph per block, built once from the
// read/write hazards between its ops, cached, and reused every step.
#include <tbb/flow_graph.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "tsan_sync.h"

namespace nabla::cpu {
namespace {

namespace flow = tbb::flow;

// The graph tells ThreadSanitizer (tsan_sync.h) what it guarantees: a node
// starts after its predecessors finished and after Run began, and Run
// returns after every node finished. Two ops that no edge orders are still
// reported if they race.

// Which ops must finish before which: read-after-write, write-after-read and
// write-after-write on every var name. Control-flow ops touch vars their
// slots do not list (through sub-blocks), so they are full barriers.
// Collectives also follow the previous collective: ranks must enter them in
// one order, which var hazards alone do not fix.
std::vector<std::vector<size_t>> BuildDependencies(const BlockDesc& block, const OpRegistry& registry) {
  const size_t n = block.OpSize();
  std::vector<std::vector<size_t>> preds(n);
  std::unordered_map<std::string, size_t> last_writer;
  std::unordered_map<std::string, std::vector<size_t>> readers_since_write;
  std::vector<size_t> since_barrier;  // ops after the last barrier
  size_t last_barrier = SIZE_MAX;
  size_t last_collective = SIZE_MAX;
  for (size_t i = 0; i < n; ++i) {
    const OpDesc& op = *block.Op(i);
    const OpInfo* info = registry.Find(op.Type());
    bool barrier = info && info->traits.control_flow;
    auto& p = preds[i];
    if (barrier) {
      p = since_barrier;
      if (last_barrier != SIZE_MAX) p.push_back(last_barrier);
    } else {
      if (last_barrier != SIZE_MAX) p.push_back(last_barrier);
      for (const auto& name : op.InputArgumentNames()) {
        if (name == kEmptyVarName) continue;
        auto w = last_writer.find(name);
        if (w != last_writer.end()) p.push_back(w->second);
      }
      for (const auto& name : op.OutputArgumentNames()) {
        if (name == kEmptyVarName) continue;
        auto w = last_writer.find(name);
        if (w != last_writer.end()) p.push_back(w->second);
        auto r = readers_since_write.find(name);
        if (r != readers_since_write.end())
          for (size_t j : r->second)
            if (j != i) p.push_back(j);
      }
    }
    if (info && info->traits.collective) {
      if (last_collective != SIZE_MAX) p.push_back(last_collective);
      last_collective = i;
    }
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    if (barrier) {
      last_barrier = i;
      since_barrier.clear();
      last_writer.clear();
      readers_since_write.clear();
      continue;
    }
    since_barrier.push_back(i);
    for (const auto& name : op.InputArgumentNames()) readers_since_write[name].push_back(i);
    for (const auto& name : op.OutputArgumentNames()) {
      last_writer[name] = i;
      readers_since_write[name].clear();
    }
  }
  return preds;
}

class TaskGraphExecutor final : public Executor {
 public:
  TaskGraphExecutor(Device& device, const ExecutorOptions& options)
      : device_(device),
        options_(options),
        arena_(options.threads > 0 ? options.threads : tbb::task_arena::automatic) {}

  std::string Name() const override { return "taskgraph"; }
  Device& GetDevice() const override { return device_; }
  const ExecutorOptions& Options() const override { return options_; }

  using Executor::Run;
  void Run(const ProgramDesc& program, int block_idx, Scope& scope, const RunOptions& options) override {
    // Nested runs (a control-flow op running its sub-block from inside a
    // node) go sequentially inside that op: a sub-block step is usually a
    // handful of small ops, where graph overhead would dominate. Nesting is
    // counted per executor, not per thread: the op's node may run on any
    // worker of the arena, and a thread-local depth sent a `while` body on a
    // worker down the graph path, rebuilding the shared graph cache while
    // the outer run used it (heap corruption, the RNN example at 2 threads).
    const bool nested = active_runs_.fetch_add(1, std::memory_order_acq_rel) > 0;
    struct ActiveGuard {
      std::atomic<int>& runs;
      ~ActiveGuard() { runs.fetch_sub(1, std::memory_order_acq_rel); }
    } active{active_runs_};
    const BlockDesc& block = *program.Block(block_idx);
    const uint64_t index = options.random_index ? *options.random_index : nested ? 0 : run_counter_++;
    RunContext run{&program, this, &options_, index, options.random_stream};
    if (nested) {
      for (const auto& op : block.AllOps()) RunOp(*op, scope, device_, run);
      return;
    }
    Graph& g = GraphFor(program, block);
    // Preparing creates every output var up front, so nodes running
    // concurrently only read the scope's map.
    if (!g.prepared || !g.prepared->Matches(program, block_idx, scope))
      g.prepared = std::make_unique<PreparedBlock>(program, block_idx, scope);
    g.run = &run;
    g.error = nullptr;
    g.failed.store(false, std::memory_order_relaxed);
    // One thread, or a block with no two ops that could overlap (a chain):
    // the graph can only run the ops one by one, in an order program order
    // also satisfies, so run them in place without handing each to a TBB
    // task (a hand-off per op costs more than a tiny op, perf).
    const char* start = &g.sync[g.op_count];
    HappensBefore(start);
    if (g.serial || arena_.max_concurrency() == 1) {
      // Inside the arena, so kernels' parallel_for keeps to --threads.
      arena_.execute([&] {
        HappensAfter(start);
        for (size_t i = 0; i < g.prepared->Size(); ++i) g.prepared->Run(i, device_, run);
        HappensBefore(start);
      });
      HappensAfter(start);
      return;
    }
    arena_.execute([&] {
      for (auto* root : g.roots) root->try_put(flow::continue_msg());
      g.graph->wait_for_all();
    });
    for (size_t i = 0; i < g.op_count; ++i) HappensAfter(&g.sync[i]);
    if (g.error) std::rethrow_exception(g.error);
  }

 private:
  struct Graph {
    std::unique_ptr<flow::graph> graph;
    std::vector<std::unique_ptr<flow::continue_node<flow::continue_msg>>> nodes;
    std::vector<flow::continue_node<flow::continue_msg>*> roots;
    std::unique_ptr<PreparedBlock> prepared;
    const RunContext* run = nullptr;
    std::exception_ptr error;
    std::mutex error_mutex;
    std::atomic<bool> failed{false};
    bool serial = false;  // no two ops may run at the same time: run in program order
    std::vector<std::vector<size_t>> preds;
    std::vector<std::vector<size_t>> groups;  // ops run in order by one node each
    std::unique_ptr<char[]> sync;             // one address per op, and one for Run (TSan only)
    size_t op_count = 0;
  };

  // Cached per (program, block); rebuilt if the block's op list changed.
  Graph& GraphFor(const ProgramDesc& program, const BlockDesc& block) {
    auto key = std::make_pair(&program, block.Idx());
    auto& slot = graphs_[key];
    // The dependencies hold while the ops are the ones last prepared
    // (renaming an op's vars changes its edges).
    if (slot && slot->prepared && slot->prepared->SameOps(block)) return *slot;
    slot = std::make_unique<Graph>();
    Graph* g = slot.get();
    g->op_count = block.OpSize();
    auto preds = BuildDependencies(block, *CurrentRegistry());
    // Longest-path levels: ops on one level are independent, so a block with
    // as many levels as ops is a chain.
    std::vector<size_t> level(preds.size(), 0);
    std::vector<char> used(preds.size() + 1, 0);
    size_t levels = 0;
    for (size_t i = 0; i < preds.size(); ++i) {
      for (size_t j : preds[i]) level[i] = std::max(level[i], level[j] + 1);
      if (!used[level[i]]) {
        used[level[i]] = 1;
        ++levels;
      }
    }
    g->serial = levels == preds.size();
    g->preds = preds;
    g->sync = std::make_unique<char[]>(preds.size() + 1);
    HappensBefore(&g->sync[preds.size()]);
    // Runs of ops that can only run one after another (an op whose one
    // predecessor has no other successor) become one node that runs them
    // in order: a branch of n ops costs one task hand-off instead of n, and
    // the graph keeps only the edges where work can overlap.
    std::vector<size_t> succ_count(preds.size(), 0);
    for (const auto& p : preds)
      for (size_t j : p) ++succ_count[j];
    std::vector<size_t> group_of(preds.size());
    g->groups.clear();
    for (size_t i = 0; i < preds.size(); ++i) {
      if (preds[i].size() == 1 && succ_count[preds[i][0]] == 1) {
        group_of[i] = group_of[preds[i][0]];  // preds[i][0] is its group's last op so far
        g->groups[group_of[i]].push_back(i);
      } else {
        group_of[i] = g->groups.size();
        g->groups.push_back({i});
      }
    }
    arena_.execute([&] {
      HappensAfter(&g->sync[preds.size()]);
      g->graph = std::make_unique<flow::graph>();
      for (size_t k = 0; k < g->groups.size(); ++k) {
        g->nodes.push_back(std::make_unique<flow::continue_node<flow::continue_msg>>(
            *g->graph, [this, g, k](const flow::continue_msg&) {
              HappensAfter(&g->sync[g->op_count]);
              for (size_t i : g->groups[k]) {
                for (size_t j : g->preds[i]) HappensAfter(&g->sync[j]);
                // An earlier op failed: skip the rest.
                if (!g->failed.load(std::memory_order_acquire)) {
                  try {
                    g->prepared->Run(i, device_, *g->run);
                  } catch (...) {
                    std::lock_guard<std::mutex> lock(g->error_mutex);
                    if (!g->error) g->error = std::current_exception();
                    g->failed.store(true, std::memory_order_release);
                  }
                }
                HappensBefore(&g->sync[i]);
              }
              return flow::continue_msg();
            }));
      }
      for (size_t k = 0; k < g->groups.size(); ++k) {
        // The group's first op holds its only edges from other groups.
        std::vector<size_t> from;
        for (size_t j : preds[g->groups[k].front()]) from.push_back(group_of[j]);
        std::sort(from.begin(), from.end());
        from.erase(std::unique(from.begin(), from.end()), from.end());
        if (from.empty()) g->roots.push_back(g->nodes[k].get());
        for (size_t j : from) flow::make_edge(*g->nodes[j], *g->nodes[k]);
      }
      HappensBefore(&g->sync[preds.size()]);
    });
    HappensAfter(&g->sync[preds.size()]);
    return *g;
  }

  Device& device_;
  ExecutorOptions options_;
  tbb::task_arena arena_;
  std::map<std::pair<const ProgramDesc*, int>, std::unique_ptr<Graph>> graphs_;
  uint64_t run_counter_ = 0;         // top-level runs given no RunOptions::random_index
  std::atomic<int> active_runs_{0};  // Run calls in progress, nested ones included
};

}  // namespace

void RegisterTaskGraphExecutor() {
  RegisterExecutor("taskgraph", [](Device& d, const ExecutorOptions& o) -> std::unique_ptr<Executor> {
    return std::make_unique<TaskGraphExecutor>(d, o);
  });
}

}  // namespace nabla::cpu
