// `nabla run CONFIG.yaml`: the main job, training as a run config says
// (docs/run-config.md); and `nabla plot METRICS`, drawing a run's metrics file.
#include <unistd.h>

#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "nabla/error.h"
#include "nabla/train/metrics.h"
#include "nabla/train/run_config.h"
#include "nabla/train/trainer.h"

namespace nabla::app {

constexpr int64_t kNotGiven = std::numeric_limits<int64_t>::min();

Command RunCommand() {
  struct Args {
    std::string config;
    // kNotGiven unless the flag is: 0 is a value to refuse, not "not given"
    // (`--epochs 0` silently trained the config's epochs).
    int64_t steps = kNotGiven;
    int64_t epochs = kNotGiven;
    bool resume = false;
    std::string progress;
    std::string weights;
  };
  auto a = std::make_shared<Args>();
  Command c("run", "Train and evaluate as a run config says (the main job)");
  c.Positional("CONFIG", &a->config, "The run config (YAML); see docs/run-config.md").Required();
  c.Option("--steps", &a->steps, "Stop after N optimizer steps in all (overrides `steps`)", "N");
  c.Option("--epochs", &a->epochs, "Train N epochs in all (overrides `epochs`)", "N");
  c.Flag("--resume", &a->resume,
         "Continue the newest run (checkpoint.dir, or its newest numbered run-N beside it) from its latest "
         "checkpoint");
  c.Option("--progress", &a->progress, "Progress display (default: the config's logging.progress)", "MODE")
      .Choices({"auto", "bar", "lines", "none"});
  c.Option("--weights", &a->weights,
           "Start from the persistable vars in a safetensors file (nabla import's weights, a checkpoint)",
           "FILE.safetensors");
  c.SetRun([a](const GlobalOptions&) {
    train::RunConfig config = train::LoadRunConfig(a->config);
    train::RunOverrides ov;
    NABLA_ENFORCE(a->steps == kNotGiven || a->steps >= 1, kInvalidArgument, "--steps must be >= 1, but received ",
                  a->steps);
    NABLA_ENFORCE(a->epochs == kNotGiven || a->epochs >= 1, kInvalidArgument, "--epochs must be >= 1, but received ",
                  a->epochs);
    if (a->steps != kNotGiven) ov.steps = a->steps;
    if (a->epochs != kNotGiven) ov.epochs = a->epochs;
    // --steps alone means "this many steps", whatever the config's epochs.
    if (a->steps != kNotGiven && a->epochs == kNotGiven) ov.epochs = 0;
    ov.resume = a->resume;
    if (!a->weights.empty()) ov.weights = a->weights;
    if (!a->progress.empty()) ov.progress = a->progress;
    const train::RunSummary summary = train::RunTraining(config, ov, std::cout, isatty(STDOUT_FILENO) == 1);
    // The shell's convention for a process ended by a signal: 130, 143.
    return summary.stopped_by_signal != 0 ? 128 + summary.stopped_by_signal : 0;
  });
  return c;
}

Command PlotCommand() {
  auto metrics = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  Command c("plot", "Draw the loss and accuracy curves of a metrics file (CSV or JSONL) with gnuplot");
  c.Positional("METRICS", metrics.get(), "The metrics file `nabla run` wrote").Required();
  c.Option("-o,--out", out.get(), "Output: .png, .svg or .txt (default: METRICS with .png)", "FILE");
  c.WithoutPlugins();
  c.SetRun([metrics, out](const GlobalOptions&) {
    std::string target = *out;
    if (target.empty()) {
      std::string m = *metrics;
      size_t dot = m.rfind('.');
      size_t slash = m.rfind('/');
      target =
          (dot != std::string::npos && (slash == std::string::npos || dot > slash) ? m.substr(0, dot) : m) + ".png";
    }
    train::PlotMetrics(*metrics, target);
    std::cout << target << std::endl;
    return 0;
  });
  return c;
}

}  // namespace nabla::app
