#include "nabla/train/resume.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "nabla/error.h"

namespace nabla::train {

namespace fs = std::filesystem;

namespace {

std::string ExactDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

double SumOf(const SafetensorsFile& f, const std::string& path, const std::string& key) {
  auto it = f.metadata.find(key);
  NABLA_ENFORCE(it != f.metadata.end(), kInvalidArgument, path, ": the checkpoint metadata lacks '", key, "'");
  const std::string& v = it->second;
  char* end = nullptr;
  const double d = v.empty() ? NAN : std::strtod(v.c_str(), &end);
  NABLA_ENFORCE(std::isfinite(d) && end == v.c_str() + v.size(), kInvalidArgument, path, ": checkpoint metadata '", key,
                "' must be a finite number, but is \"", v, "\"");
  return d;
}

// The sums of a checkpoint that has them (all six, or it is damaged).
std::optional<MetricSums> ReadMetricSums(const SafetensorsFile& f, const std::string& path) {
  if (!f.metadata.count("epoch_samples")) return std::nullopt;
  MetricSums s;
  s.epoch_loss = SumOf(f, path, "epoch_loss_sum");
  s.epoch_samples = CheckpointCount(f, path, "epoch_samples");
  s.epoch_correct = CheckpointCount(f, path, "epoch_correct");
  s.window_loss = SumOf(f, path, "window_loss_sum");
  s.window_samples = CheckpointCount(f, path, "window_samples");
  s.window_correct = CheckpointCount(f, path, "window_correct");
  return s;
}

}  // namespace

std::map<std::string, std::string> MetricSumsMetadata(const MetricSums& sums) {
  return {
      {"epoch_loss_sum", ExactDouble(sums.epoch_loss)},        {"epoch_samples", std::to_string(sums.epoch_samples)},
      {"epoch_correct", std::to_string(sums.epoch_correct)},   {"window_loss_sum", ExactDouble(sums.window_loss)},
      {"window_samples", std::to_string(sums.window_samples)}, {"window_correct", std::to_string(sums.window_correct)}};
}

std::optional<ResumePoint> FindResumePoint(const std::string& dir, std::ostream& warn) {
  RemoveStaleTempFiles(dir);
  const std::vector<CheckpointInfo> all = ListCheckpoints(dir);
  if (all.empty()) return std::nullopt;
  std::vector<std::string> damaged;
  std::string first_reason;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    ResumePoint p;
    p.path = it->path;
    try {
      p.file = ReadSafetensors(p.path);
      p.step = CheckpointCount(p.file, p.path, "step");
      p.epoch = CheckpointCount(p.file, p.path, "epoch");
      p.batch = CheckpointCount(p.file, p.path, "batch");
      p.sums = ReadMetricSums(p.file, p.path);
    } catch (const Error& e) {
      if (first_reason.empty()) first_reason = e.what();
      damaged.push_back(p.path);
      if (std::next(it) != all.rend()) {
        warn << "warning: " << e.what() << "; moved aside to " << p.path << ".damaged; falling back to "
             << std::next(it)->path << std::endl;
      }
      continue;
    }
    // Only once an intact one is found do the damaged ones go aside, so the
    // run's new checkpoints are not outnumbered by them under keep_last and a
    // later --resume does not trip over them again.
    for (const auto& d : damaged) {
      std::error_code ec;
      fs::rename(d, d + ".damaged", ec);
    }
    return p;
  }
  std::string names;
  for (const auto& d : damaged) names += (names.empty() ? "" : ", ") + d;
  NABLA_THROW(kInvalidArgument, "no intact checkpoint to resume from in ", dir, ": ", names,
              damaged.size() == 1 ? " is" : " are all", " damaged (newest: ", first_reason, ")");
}

void RestoreCheckpoint(const ResumePoint& point, const std::vector<std::string>& persistables, const std::string& skip,
                       Scope& scope, Device& device) {
  const auto& tensors = point.file.tensors;
  // Both lists are sorted, so the first name in one and not the other is the
  // first difference a user should hear about.
  auto want = persistables.begin();
  auto have = tensors.begin();
  while (want != persistables.end() || have != tensors.end()) {
    if (have == tensors.end() || (want != persistables.end() && *want < have->first)) {
      NABLA_THROW(kInvalidArgument, point.path, ": the checkpoint has no tensor '", *want,
                  "', which the program needs (was it written by another program or optimizer?)");
    }
    if (want == persistables.end() || have->first < *want) {
      NABLA_THROW(kInvalidArgument, point.path, ": the checkpoint holds tensor '", have->first,
                  "', which the program does not have (was it written by another program or optimizer?)");
    }
    const std::string& name = *want;
    const Tensor& src = have->second;
    ++want;
    ++have;
    if (name == skip) continue;
    Tensor& dst = scope.Var(name)->GetTensor();
    NABLA_ENFORCE(dst.GetShape() == src.GetShape() && dst.GetDType() == src.GetDType(), kInvalidArgument, point.path,
                  ": tensor '", name, "' is ", DTypeName(src.GetDType()), ShapeToString(src.GetShape()),
                  ", but the program's var is ", DTypeName(dst.GetDType()), ShapeToString(dst.GetShape()));
    dst.CopyFrom(src, device);
  }
}

void CheckFreshCheckpointDir(const std::string& dir) {
  const std::vector<CheckpointInfo> all = ListCheckpoints(dir);
  NABLA_ENFORCE(all.empty(), kAlreadyExists, dir, ": the checkpoint folder already holds ", all.size(),
                " checkpoint(s) of an earlier run (newest ", all.empty() ? "" : all.back().path,
                "); pass --resume to continue that run, or remove them or choose another checkpoint.dir to start anew");
}

namespace {

// Whether run `run` left anything: a checkpoint folder, a metrics file or a
// plot where it would have written them.
bool RunExists(const RunConfig& c, int run) {
  std::error_code ec;
  for (const std::string* p : {&c.checkpoint.dir, &c.logging.metrics_file, &c.logging.plot})
    if (!p->empty() && fs::exists(RunOutputPath(*p, run), ec)) return true;
  return false;
}

// Whether run 1, the configured paths, holds a run: checkpoints, or a metrics
// file (an empty checkpoint folder or a plot alone is nothing to continue).
bool RunHeld(const RunConfig& c, int run) {
  std::error_code ec;
  if (!c.checkpoint.dir.empty() && !ListCheckpoints(RunOutputPath(c.checkpoint.dir, run)).empty()) return true;
  return !c.logging.metrics_file.empty() && fs::exists(RunOutputPath(c.logging.metrics_file, run), ec);
}

}  // namespace

std::string RunOutputPath(const std::string& configured, int run) {
  if (run <= 1 || configured.empty()) return configured;
  fs::path p = fs::path(configured).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "dir/" names dir
  return (p.parent_path() / ("run-" + std::to_string(run)) / p.filename()).string();
}

int ChooseRun(const RunConfig& c, bool resume) {
  // Runs are numbered without gaps: the newest is the last that exists.
  int newest = 1;
  while (newest < 100000 && RunExists(c, newest + 1)) ++newest;
  if (resume) return newest;
  if (newest == 1 && !RunHeld(c, 1)) return 1;
  return newest + 1;
}

RunConfig ForRun(RunConfig c, int run) {
  c.checkpoint.dir = RunOutputPath(c.checkpoint.dir, run);
  c.logging.metrics_file = RunOutputPath(c.logging.metrics_file, run);
  c.logging.plot = RunOutputPath(c.logging.plot, run);
  return c;
}

}  // namespace nabla::train
