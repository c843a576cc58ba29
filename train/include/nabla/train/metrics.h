#pragma once
// The machine-readable metrics of a run (CSV or JSONL, chosen by the file
// extension) and the gnuplot drawing of its loss and accuracy curves.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace nabla::train {

struct MetricRow {
  // "step": the running mean over the last logging interval; "train" and
  // "eval": a whole epoch.
  std::string phase;
  double epoch = 0;  // fractional for "step" rows (1.25 = a quarter into epoch 2)
  int64_t step = 0;  // optimizer steps done
  double loss = 0;
  std::optional<double> accuracy;
  double samples_per_sec = 0;
  double elapsed_s = 0;
};

class MetricsWriter {
 public:
  // Appends when `append` (a resumed run), else starts a new file; every
  // row is flushed so a killed run keeps its history.
  MetricsWriter(const std::string& path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void Write(const MetricRow& row);
  const std::string& Path() const { return path_; }

 private:
  [[noreturn]] void Fail();

  std::string path_;
  bool jsonl_ = false;
  std::FILE* file_ = nullptr;
};

std::vector<MetricRow> ReadMetrics(const std::string& path);

// A resumed run appends to the metrics file; the rows the interrupted run
// wrote after its checkpoint at `step` would then appear twice, so they go
// first (rows that do not parse are kept). Rewrites the file atomically.
void DropMetricsAfterStep(const std::string& path, int64_t step);

// Draws loss and accuracy against epochs with gnuplot into `out` (.png via
// pngcairo or png, .svg, or .txt as ASCII art). Throws when gnuplot or the
// terminal is missing.
void PlotMetrics(const std::string& metrics_path, const std::string& out);

}  // namespace nabla::train
