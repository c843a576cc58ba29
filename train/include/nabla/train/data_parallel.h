#pragma once
// Data-parallel training over MPI (docs/distributed.md), kept apart from the training
// loop: the world this process belongs to, the program pass that inserts
// the gradient collectives, the split of every batch among the ranks, and
// the run-time collectives the trainer needs (parameters from rank 0,
// statistics summed over ranks). MPI itself stays in the collective_ops
// plugin: everything here goes through its ops.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nabla/backward.h"
#include "nabla/executor.h"
#include "nabla/program.h"
#include "nabla/scope.h"
#include "nabla/train/run_config.h"

namespace nabla::train {

// This process's place in the MPI world, from the launcher's environment
// (rank 0 of 1 when no MPI launcher started it).
struct World {
  int rank = 0;
  int size = 1;
  bool Distributed() const { return size > 1; }
  bool Leader() const { return rank == 0; }
};
World DetectWorld();
// DetectWorld, checked against the run config's `distributed` section: a
// config that insists on a world size the launcher did not give (or asks
// for more than one rank without a launcher) is an error naming it.
World WorldForRun(const DistributedConfig& config, const std::string& config_path);

// The vars the pass adds; they hold per-rank, per-step values, not state,
// so checkpoints leave them out.
bool IsDataParallelVar(const std::string& name);

struct DataParallelOptions {
  int world_size = 1;
  // Gradients are packed into buckets of about this many MiB, one allreduce
  // each (PyTorch DDP's 25 MB default); 0 gives every gradient its own.
  double bucket_mb = 25;
  double timeout_s = 0;  // the collectives' timeout_s attribute; 0: no limit
};

// The var, one per gradient dtype, holding this rank's share of the global
// batch (its samples / the batch's samples; 1/world_size when the batch
// splits evenly). Each gradient is multiplied by it before the allreduce
// sums them, so the sum is the gradient of the global batch's mean loss even
// when the last batch splits unevenly.
std::string GradScaleVar(DType dtype);

// The pass: after the last writer of each gradient in the root block, a
// multiply by GradScaleVar; after the last gradient of each bucket, one
// c_allreduce_sum of the bucket, in place. Buckets follow the order in which
// backward finishes the gradients, the same on every rank, and the
// collective trait keeps the allreduces in that order while the task graph
// overlaps them with the rest of backward. The scale vars are persistable,
// filled with 1/world_size by the startup program (the trainer rewrites
// them per step). Returns the number of allreduces inserted.
size_t InsertGradientAllreduce(ProgramDesc& program, const ParamGrads& param_grads, const DataParallelOptions& o);

// This rank's rows [first, second) of the global batch's rows [b0, b1): the
// ranks split it as evenly as they can, in rank order, so every rank runs
// every step (a rank may get no rows of a batch smaller than the world).
std::pair<int64_t, int64_t> ShardOf(int64_t b0, int64_t b1, const World& world);

// What a rank feeds for one training step: its shard, or, when the shard is
// empty, one row of the batch whose gradient it then scales by 0 (every rank
// must take part in every allreduce).
struct StepShard {
  int64_t begin = 0, end = 0;  // rows fed
  int64_t rows = 0;            // rows that count (0 for a stand-in row)
  double grad_scale = 1;       // rows / the batch's rows
};
StepShard TrainShard(int64_t b0, int64_t b1, const World& world);
// Writes the step's grad scale into every GradScaleVar the program has.
void SetGradScale(Scope& scope, double scale);

// Run-time collectives through the collective_ops plugin's ops.
class Collectives {
 public:
  // `executor` is non-owning and must outlive this object.
  Collectives(const World& world, Executor& executor, double timeout_s);

  // Every initialized tensor named in `names` (found from `scope`) takes
  // rank 0's value: one fused c_broadcast per dtype.
  void BroadcastFromRoot(Scope& scope, const std::vector<std::string>& names);
  // The element-wise sum of `values` over all ranks (one c_allreduce_sum).
  std::vector<double> Sum(const std::vector<double>& values);

 private:
  World world_;
  Executor& executor_;
  double timeout_s_;
  Scope scope_;  // the statistics var lives here
  std::vector<std::unique_ptr<ProgramDesc>> programs_;
  std::map<int64_t, std::unique_ptr<ProgramDesc>> sum_programs_;
};

}  // namespace nabla::train
