// The task-graph executor: one tbb::flow::graph per block, built once from the
// read/write hazards between its ops, cached, and reused every step.
#include <tbb/flow_graph.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "keep_warm.h"
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
std::vector<std::vector<size_t>> BuildDependencies(const BlockDesc& block, const OpRegistry& registry) {
  const size_t n = block.OpSize();
  std::vector<std::vector<size_t>> preds(n);
  std::unordered_map<std::string, size_t> last_writer;
  std::unordered_map<std::string, std::vector<size_t>> readers_since_write;
  std::vector<size_t> since_barrier;  // ops after the last barrier
  size_t last_barrier = SIZE_MAX;
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

// Keeping the arena's worker awake through a run and between back-to-back
// runs. A TBB worker that finds no work sleeps, and waking it again costs
// about as long as a branch of a small block on a busy VM (docs/
// performance.md, case (g)), so the master would run both branches alone.
// So a worker out of work runs a keep-warm task that spins until new work
// may have appeared (a run or a parallel loop started: keep_warm.h) and
// then returns to TBB's loop, still awake, to take it. Between runs it
// spins at most kWarmWindow after the last run ended, so a process idle
// between runs burns at most that much of one core per run.
constexpr std::chrono::microseconds kWarmWindow{2000};

struct WarmState {
  std::atomic<bool> in_run{false};   // a top-level Run of this executor is under way
  std::atomic<bool> stop{false};     // the executor is gone
  std::atomic<int64_t> until_ns{0};  // between runs, spin until then (steady_clock)
  std::atomic<int> spinning{0};      // keep-warm tasks spinning now
  std::atomic<size_t> unstarted{0};  // graph nodes of the current run not started yet
};

// How deep this thread is in Runs: a master waiting inside one may pick up a
// keep-warm task, which must not spin there (its own run's work would wait).
thread_local int run_depth = 0;

// TSan: queueing a keep-warm task happens before it runs. Not a member of
// the task's captures: the task must sync before it reads them.
char warm_sync = 0;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// `epoch` is the work signal's epoch when the task was queued: if it moved
// before the task started (its worker was asleep and a run or loop began
// meanwhile), spinning now could keep the worker from that work.
// Pauses first (the cheapest wait that still notices within nanoseconds),
// then yields the core to any other runnable thread.
void KeepWarm(const std::shared_ptr<WarmState>& s, uint64_t epoch);

auto MakeKeepWarmTask(std::shared_ptr<WarmState> s, uint64_t epoch) {
  HappensBefore(&warm_sync);
  return [s = std::move(s), epoch] {
    HappensAfter(&warm_sync);
    KeepWarm(s, epoch);
  };
}

void KeepWarm(const std::shared_ptr<WarmState>& s, uint64_t epoch) {
  if (run_depth > 0) return;
  const WorkSignal& work = GlobalWorkSignal();
  const uint64_t now = work.epoch.load();
  if (now != epoch) {
    // Woken late, in a run: if all its work is taken already, this worker
    // would only go back to sleep; spin for what comes next instead.
    if (!s->in_run.load() || s->unstarted.load() != 0 || work.loops.load() != 0) return;
    epoch = now;
  }
  auto wanted = [&] {
    return work.epoch.load() == epoch && work.loops.load() == 0 && !s->stop.load() &&
           (s->in_run.load() || NowNs() < s->until_ns.load());
  };
  if (!wanted()) return;
  // The next one, queued while this one spins: an arena with nothing queued
  // counts as out of work, and TBB then takes its worker back as soon as
  // this task returns, before it can steal the next run's work. It returns
  // at once when it starts after new work appeared (epoch moved) or once
  // the window has passed, so the chain ends when the runs do.
  tbb::this_task_arena::enqueue(MakeKeepWarmTask(s, epoch));
  s->spinning.fetch_add(1);
  for (int spins = 0; wanted(); ++spins) {
    if (spins < 256) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  s->spinning.fetch_sub(1);
}

class TaskGraphExecutor final : public Executor {
 public:
  TaskGraphExecutor(Device& device, const ExecutorOptions& options)
      : device_(device),
        options_(options),
        arena_(options.threads > 0 ? options.threads : tbb::task_arena::automatic),
        warm_(std::make_shared<WarmState>()) {}

  // A keep-warm task still queued or spinning holds its own reference to
  // the state and returns at once when it sees stop.
  ~TaskGraphExecutor() override { warm_->stop.store(true, std::memory_order_release); }

  std::string Name() const override { return "taskgraph"; }
  Device& GetDevice() const override { return device_; }
  const ExecutorOptions& Options() const override { return options_; }

  void Run(const ProgramDesc& program, int block_idx, Scope& scope) override {
    // Nested runs (a control-flow op running its sub-block from inside a
    // node) go sequentially inside that op: a sub-block step is usually a
    // handful of small ops, where graph overhead would dominate.
    int& depth = run_depth;
    const BlockDesc& block = *program.Block(block_idx);
    RunContext run{&program, this, &options_, depth == 0 ? run_counter_++ : 0};
    if (depth > 0) {
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
    ++depth;
    struct DepthGuard {
      int& d;
      ~DepthGuard() { --d; }
    } guard{depth};
    struct WarmGuard {
      TaskGraphExecutor& e;
      bool on;
      ~WarmGuard() {
        if (on) e.KeepWorkersWarm();
      }
    } warm{*this, arena_.max_concurrency() > 1};
    if (warm.on) {
      warm_->unstarted.store(0);
      warm_->in_run.store(true);
    }
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
    warm_->unstarted.store(g.groups.size());
    arena_.execute([&] {
      for (auto* root : g.roots) root->try_put(flow::continue_msg());
      // Only now, with the roots spawned: a worker that stopped spinning
      // earlier would find nothing to steal and go to sleep.
      GlobalWorkSignal().epoch.fetch_add(1);
      g.graph->wait_for_all();
    });
    for (size_t i = 0; i < g.op_count; ++i) HappensAfter(&g.sync[i]);
    if (g.error) std::rethrow_exception(g.error);
  }

 private:
  // After a run: a keep-warm task holds the worker for the next one, unless
  // one already spins (the worker ran out of work before the run ended) and
  // now sees the new deadline.
  void KeepWorkersWarm() {
    warm_->until_ns.store(NowNs() + std::chrono::nanoseconds(kWarmWindow).count());
    warm_->in_run.store(false);
    if (warm_->spinning.load() == 0) QueueKeepWarm();
  }

  void QueueKeepWarm() { arena_.enqueue(MakeKeepWarmTask(warm_, GlobalWorkSignal().epoch.load())); }

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
    const OpDesc* first_op = nullptr;
  };

  // Cached per (program, block); rebuilt if the block's op list changed.
  Graph& GraphFor(const ProgramDesc& program, const BlockDesc& block) {
    auto key = std::make_pair(&program, block.Idx());
    auto& slot = graphs_[key];
    const OpDesc* first = block.OpSize() ? block.Op(0) : nullptr;
    if (slot && slot->op_count == block.OpSize() && slot->first_op == first) return *slot;
    slot = std::make_unique<Graph>();
    Graph* g = slot.get();
    g->op_count = block.OpSize();
    g->first_op = first;
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
              warm_->unstarted.fetch_sub(1);
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
              // A worker done while every node has started finds no more of
              // this run's work; spinning keeps it from sleeping before the
              // next run (or a parallel loop in a node still running).
              if (warm_->unstarted.load() == 0 && tbb::this_task_arena::current_thread_index() != 0 &&
                  warm_->spinning.load() == 0)
                QueueKeepWarm();
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
  std::shared_ptr<WarmState> warm_;
  std::map<std::pair<const ProgramDesc*, int>, std::unique_ptr<Graph>> graphs_;
  uint64_t run_counter_ = 0;
};

}  // namespace

void RegisterTaskGraphExecutor() {
  RegisterExecutor("taskgraph", [](Device& d, const ExecutorOptions& o) -> std::unique_ptr<Executor> {
    return std::make_unique<TaskGraphExecutor>(d, o);
  });
}

}  // namespace nabla::cpu
