#pragma once
// Picking the checkpoint a run resumes from, and the guard that keeps a fresh
// run out of a folder holding another run's checkpoints.
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "nabla/device.h"
#include "nabla/scope.h"
#include "nabla/train/checkpoint.h"
#include "nabla/train/run_config.h"

namespace nabla::train {

// The sums behind a run's reported loss and accuracy where a checkpoint was
// written: those of the current epoch's batches done (its `train` row and
// the summary) and those of the steps since the last `step` row (the next
// one), so a run resumed mid-epoch reports what the uninterrupted run does.
struct MetricSums {
  double epoch_loss = 0;  // the batch losses times their rows, summed
  int64_t epoch_samples = 0, epoch_correct = 0;
  double window_loss = 0;
  int64_t window_samples = 0, window_correct = 0;
};

// The checkpoint metadata that records `sums` (the loss sums with 17
// significant digits, which read back to the same double).
std::map<std::string, std::string> MetricSumsMetadata(const MetricSums& sums);

struct ResumePoint {
  std::string path;
  SafetensorsFile file;
  int64_t step = 0, epoch = 0, batch = 0;
  // None in a checkpoint written before they were recorded.
  std::optional<MetricSums> sums;
};

// The newest intact checkpoint in `dir` (nullopt when there is none at all).
// A damaged one (unreadable, bad header or sizes, failed checksum, bad counts)
// costs one "warning:" line on `warn` and the next older one is tried (the
// damaged ones are renamed to *.damaged once an intact one is found); when
// every one is damaged it is kInvalidArgument naming them all.
std::optional<ResumePoint> FindResumePoint(const std::string& dir, std::ostream& warn);

// Copies the checkpoint's tensors into `scope` (on `device`). The checkpoint
// must hold exactly `persistables` with the scope's shapes and dtypes; the
// first difference is kInvalidArgument naming the file and the tensor.
// `skip` (the learning rate, which follows the config) is not copied.
void RestoreCheckpoint(const ResumePoint& point, const std::vector<std::string>& persistables, const std::string& skip,
                       Scope& scope, Device& device);

// A run that does not resume must not share its folder with checkpoints of an
// earlier run: keep_last would delete its own newer files and a later
// --resume would continue the old run. kAlreadyExists naming the newest one.
void CheckFreshCheckpointDir(const std::string& dir);

// Numbered runs, as PyTorch Lightning's version_N folders: run 1 writes its
// outputs (checkpoint.dir, logging.metrics_file, logging.plot) where the
// config says; run N > 1 writes each of them into a folder `run-N` beside
// it (runs/mlp/checkpoints -> runs/mlp/run-2/checkpoints, runs/mlp/metrics.csv
// -> runs/mlp/run-2/metrics.csv), so the same command can run again without
// mixing two runs' checkpoints or overwriting the first run's metrics.
std::string RunOutputPath(const std::string& configured, int run);

// The run a start writes to: a fresh run takes run 1 when its outputs hold
// no earlier run (no checkpoint in checkpoint.dir, no metrics file), else the
// number after the newest run found; with `resume` it continues the newest
// run (1 when there is none).
int ChooseRun(const RunConfig& config, bool resume);

// `config` with its outputs moved into run `run`'s folder.
RunConfig ForRun(RunConfig config, int run);

}  // namespace nabla::train
