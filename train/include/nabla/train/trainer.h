#pragma once
// A run config run to the end: plugins -> program -> the pass pipeline
// (pipeline.h) -> verify -> startup -> train loop with per-epoch evaluation
// -> summary, checkpoints, metrics and plot. `nabla run`, Python's
// nabla.train.run and embedding programs call RunTraining:
//
//   nabla::PluginManager::Instance().LoadDefaults();
//   const train::RunConfig config = train::LoadRunConfig("run.yaml");
//   const train::RunSummary s = train::RunTraining(config, {}, std::cout, false);
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "nabla/backward.h"
#include "nabla/program.h"
#include "nabla/train/run_config.h"

namespace nabla::train {

// Command-line overrides of the config.
struct RunOverrides {
  std::optional<int64_t> steps;
  std::optional<int64_t> epochs;
  bool resume = false;
  std::optional<std::string> progress;  // auto | bar | lines | none
  std::optional<std::string> weights;   // --weights FILE.safetensors, before any resume
};

// The programs a run executes, built from the config before any data is read.
struct TrainPrograms {
  ProgramDesc main;  // forward + metrics + backward + optimizer
  ProgramDesc eval;  // forward + metrics only, is_test set where ops have it
  ParamGrads param_grads;
  std::vector<std::string> persistables;  // what a checkpoint holds, sorted
  std::string learning_rate;              // the LR var (refilled from the config on resume)
  std::string accuracy;                   // the Correct-count var ("" without the metric)
  std::string accuracy_label;             // the label var the metric reads
  std::string logits;                     // the scores a Label is ranked by ("" when none is found)
  int64_t classes = 0;                    // class count when known (labels are checked against it)
  bool bf16 = false;                      // the bf16 mixed-precision pass ran (precision: bf16, and the CPU can)
};

// Loads the program and appends the metric, backward and optimizer ops
// (plugins must already be loaded); with world_size > 1, also the gradient
// allreduces (data_parallel.h) between backward and the optimizer.
TrainPrograms BuildTrainPrograms(const RunConfig& config, int world_size = 1);

struct EpochStats {
  double loss = 0;
  std::optional<double> accuracy;
  int64_t samples = 0;
};

struct RunSummary {
  int64_t steps = 0;               // optimizer steps done, resumed ones included
  int64_t epochs = 0;              // completed epochs
  EpochStats train;                // of the last epoch run
  std::optional<EpochStats> eval;  // of the last evaluation
  double seconds = 0;
  double samples_per_sec = 0;
  std::string last_checkpoint;
  int stopped_by_signal = 0;  // SIGINT or SIGTERM when one stopped the run early

  int world_size = 1;  // MPI ranks that trained together
  // The numbered run it wrote to (resume.h: 1 is the configured paths) and
  // where its outputs went ("" for those the config has none of).
  int run = 1;
  std::string checkpoint_dir;
  std::string metrics_file;
  std::string plot;
};

// Runs a whole training as the config says, printing progress to `out`
// (a bar when `out_is_tty`, plain lines otherwise). Under an MPI launcher
// every rank runs it; only rank 0 prints, writes metrics and checkpoints.
RunSummary RunTraining(const RunConfig& config, const RunOverrides& overrides, std::ostream& out, bool out_is_tty);

}  // namespace nabla::train
