#include "nabla/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_set>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/fusion.h"
#include "nabla/mixed_precision.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "nabla/train.h"
#include "nabla/train/checkpoint.h"
#include "nabla/train/data_parallel.h"
#include "nabla/train/dataset.h"
#include "nabla/train/metrics.h"
#include "nabla/train/pipeline.h"
#include "nabla/train/precision.h"
#include "nabla/train/resume.h"
#include "nabla/train/stop_signal.h"
#include "nabla/train/weights.h"

namespace nabla::train {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The label var: the configured one, else the only integer feed.
std::string FindLabel(const RunConfig& c, const BlockDesc& block) {
  if (!c.accuracy.label.empty()) return c.accuracy.label;
  std::vector<std::string> ints;
  for (const auto& f : c.data.train.feeds) {
    const VarDesc* v = block.FindVar(f.var);
    if (v && !IsFloating(v->GetDType())) ints.push_back(f.var);
  }
  NABLA_ENFORCE(ints.size() == 1, kInvalidArgument, c.accuracy.pos.Where(),
                ": metrics.accuracy needs the label var: expected exactly one integer feed var, but found ",
                ints.size(), "; set metrics.accuracy.label");
  return ints.front();
}

double ReadScalar(const Tensor& t, const std::string& name) {
  NABLA_ENFORCE(t.IsInitialized() && t.Numel() >= 1, kPreconditionNotMet, "'", name,
                "' was not computed by the step (it holds no data)");
  Tensor host;
  const Tensor* src = &t;
  if (t.GetDevice() != &HostDevice()) {
    host.CopyFrom(t, HostDevice());
    src = &host;
  }
  switch (src->GetDType()) {
    case DType::kFloat32:
      return src->Data<float>()[0];
    case DType::kFloat64:
      return src->Data<double>()[0];
    case DType::kInt32:
      return src->Data<int32_t>()[0];
    case DType::kInt64:
      return static_cast<double>(src->Data<int64_t>()[0]);
    case DType::kBool:
      return src->Data<bool>()[0];
    case DType::kBFloat16:
      return Bf16ToFloat(src->Data<bfloat16>()[0]);
  }
  return 0;
}

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  } else if (t >= 60) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lds", t);
  }
  return buf;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// The one line a stop by signal prints, after writing a checkpoint of the
// steps done since the last one (nothing to write when none ran).
void StopForSignal(int sig, int64_t step, bool stepped, const std::string& dir, const std::function<void()>& save,
                   std::string& last_checkpoint) {
  std::string what;
  if (dir.empty()) {
    what = "wrote no checkpoint (the config has no checkpoint.dir)";
  } else {
    auto all = ListCheckpoints(dir);
    if (stepped && (all.empty() || all.back().step != step)) save();
    what = last_checkpoint.empty() ? std::string("no step ran, so there is no checkpoint")
                                   : "checkpoint " + last_checkpoint + "; continue with --resume";
  }
  std::cerr << "nabla: stopped by " << StopSignals::Name(sig) << " after step " << step << "; " << what << std::endl;
}

std::string Percent(const std::optional<double>& a) { return a ? Fixed(*a * 100, 2) + " %" : "-"; }

// Progress on a terminal: one line redrawn in place, at most 10 times a
// second. Elsewhere: a plain line every `every` steps.
class Progress {
 public:
  Progress(std::ostream& out, std::string mode, int64_t every) : out_(out), mode_(std::move(mode)), every_(every) {}

  void Step(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t step, double loss,
            std::optional<double> acc, double samples_per_sec, double eta_s) {
    if (mode_ == "bar") {
      auto now = Clock::now();
      if (drawn_ && now - last_ < std::chrono::milliseconds(100) && batch != batches) return;
      last_ = now;
      drawn_ = true;
      const int width = 24;
      int filled = batches > 0 ? static_cast<int>(width * batch / batches) : 0;
      std::string bar(filled, '#');
      bar += std::string(width - filled, '.');
      out_ << "\r\033[K"
           << "epoch " << epoch << EpochsText(epochs) << " [" << bar << "] " << batch << "/" << batches << "  loss "
           << Fixed(loss, 4);
      if (acc) out_ << "  acc " << Fixed(*acc * 100, 2) << "%";
      out_ << "  " << Fixed(samples_per_sec, 0) << " samples/s  ETA " << Duration(eta_s) << std::flush;
    } else if (mode_ == "lines" && step % every_ == 0) {
      out_ << "epoch " << epoch << EpochsText(epochs) << "  step " << step << "  batch " << batch << "/" << batches
           << "  loss " << Fixed(loss, 4);
      if (acc) out_ << "  acc " << Fixed(*acc * 100, 2) << "%";
      out_ << "  " << Fixed(samples_per_sec, 0) << " samples/s  ETA " << Duration(eta_s) << std::endl;
    }
  }
  // Ends the bar's line before anything else is printed.
  void Break() {
    if (drawn_) out_ << "\r\033[K" << std::flush;
    drawn_ = false;
  }
  bool Quiet() const { return mode_ == "none"; }

 private:
  static std::string EpochsText(int64_t epochs) { return epochs > 0 ? "/" + std::to_string(epochs) : ""; }
  std::ostream& out_;
  std::string mode_;
  int64_t every_;
  bool drawn_ = false;
  Clock::time_point last_;
};

struct Split {
  Dataset data;
  std::vector<FeedBinding> feeds;
};

// Feeds read columns of `data`, which must not move afterwards (a Split is
// built in place and only moved as a whole: the bindings point into the
// map's nodes, which a move keeps).
void BindSplit(Split& out, const SplitConfig& s, const BlockDesc& block, const TrainPrograms& tp) {
  for (const auto& f : s.feeds) {
    const VarDesc* v = block.FindVar(f.var);
    NABLA_ENFORCE(v != nullptr, kNotFound, f.pos.Where(), ": feed var '", f.var, "' is not a var of the program");
    out.feeds.push_back(BindFeed(f.var, v->GetShape(), v->GetDType(), out.data.Get(f.column), f.scale, f.pos.Where()));
    if (!IsFloating(v->GetDType()) && tp.classes > 0 && f.var == tp.accuracy_label) {
      CheckLabelRange(out.feeds.back(), tp.classes, f.pos.Where());
    }
  }
}

// A text split's errors name the config position of the split they read.
TextSplits ReadTextSplit(const SplitConfig& s, int64_t seq_len, double eval_fraction, const std::string& split) {
  try {
    return ReadTextDataset(ExpandTextFiles(s.text_files, s.text_exclude), seq_len, eval_fraction, split);
  } catch (const Error& e) {
    throw Error(e.kind(), StrCat(s.pos.Where(), ": ", e.what()));
  }
}

// An idx, npy or csv split's errors (a missing or damaged file) name the
// config position of the file they are about (its `files:` entry, csv's
// `path:`), else the split's, as a text split's do.
template <typename Read>
Dataset ReadFileSplit(const SplitConfig& s, Read read) {
  try {
    return read();
  } catch (const Error& e) {
    const std::string what = e.what();
    ConfigPos pos = s.pos;
    auto about = [&what](const std::string& path) { return !path.empty() && what.rfind(path + ":", 0) == 0; };
    for (const auto& [column, path] : s.files) {
      auto it = s.file_pos.find(column);
      if (about(path) && it != s.file_pos.end()) pos = it->second;
    }
    if (about(s.path) && s.file_pos.count("path")) pos = s.file_pos.at("path");
    throw Error(e.kind(), StrCat(pos.Where(), ": ", what));
  }
}

Split LoadSplit(const RunConfig& c, const SplitConfig& s, const BlockDesc& block, const TrainPrograms& tp) {
  Split out;
  const DataConfig& d = c.data;
  if (d.format == "idx") {
    out.data = ReadFileSplit(s, [&] { return ReadIdxDataset(s.files); });
  } else if (d.format == "npy") {
    out.data = ReadFileSplit(s, [&] { return ReadNpyDataset(s.files); });
  } else if (d.format == "text") {
    out.data = ReadTextSplit(s, d.seq_len, 0, &s == &d.train ? "training" : "evaluation").train;
  } else {
    std::vector<std::string> specs;
    for (const auto& f : s.feeds) specs.push_back(f.column);
    out.data = ReadFileSplit(s, [&] { return ReadCsvDataset(s.path, specs, d.csv_header, d.csv_delimiter); });
  }
  BindSplit(out, s, block, tp);
  return out;
}

// The training split and the evaluation split, if any: a text dataset with
// eval_fraction holds out the tail of each training file.
std::pair<Split, std::optional<Split>> LoadSplits(const RunConfig& c, const BlockDesc& block, const TrainPrograms& tp) {
  const DataConfig& d = c.data;
  if (d.format == "text" && d.eval_fraction > 0) {
    TextSplits t = ReadTextSplit(d.train, d.seq_len, d.eval_fraction, "training");
    // Asked to hold text out, a run that would print no eval loss is an
    // error: each file needs two windows for one to go.
    NABLA_ENFORCE(t.eval.Size() > 0, kInvalidArgument, d.train.pos.Where(), ": data.eval_fraction ", d.eval_fraction,
                  " holds out no window: no text file has two windows of ", d.seq_len + 1,
                  " bytes (one stays for training); give longer files, a shorter seq_len or data.eval");
    std::pair<Split, std::optional<Split>> out;
    out.first.data = std::move(t.train);
    BindSplit(out.first, d.train, block, tp);
    out.second.emplace();
    out.second->data = std::move(t.eval);
    BindSplit(*out.second, d.train, block, tp);
    return out;
  }
  std::pair<Split, std::optional<Split>> out{LoadSplit(c, d.train, block, tp), std::nullopt};
  if (d.eval.present) out.second = LoadSplit(c, d.eval, block, tp);
  return out;
}

}  // namespace

TrainPrograms BuildTrainPrograms(const RunConfig& c, int world_size) {
  TrainPrograms tp;
  if (c.program_path.empty()) {
    tp.main = ParseProgram(c.program_text, c.path);
  } else {
    try {
      tp.main = LoadProgram(c.program_path);
    } catch (const Error& e) {
      // A file that is missing or cannot be read (LoadProgram's messages
      // about "program file 'PATH'") is the `program:` key's fault; errors
      // inside it name their own file:line:col.
      const std::string what = e.what();
      if (what.find("program file '" + c.program_path + "'") == std::string::npos) throw;
      throw Error(e.kind(), StrCat(c.program_pos.Where(), ": ", what));
    }
  }
  ProgramDesc& program = tp.main;
  BlockDesc* block = program.Root();
  NABLA_ENFORCE(block->FindVar(c.loss) != nullptr, kNotFound, c.loss_pos.Where(), ": loss '", c.loss,
                "' is not a var of the program's root block");
  for (const auto& f : c.data.train.feeds) {
    NABLA_ENFORCE(block->FindVar(f.var) != nullptr, kNotFound, f.pos.Where(), ": feed var '", f.var,
                  "' is not a var of the program's root block");
  }
  // The label and the class count, for the metric and for range checks.
  std::string label;
  if (c.accuracy.enabled) {
    label = FindLabel(c, *block);
  } else {
    for (const auto& f : c.data.train.feeds) {
      const VarDesc* v = block->FindVar(f.var);
      if (!IsFloating(v->GetDType()) && !FindScoresFor(*block, f.var).empty()) label = f.var;
    }
  }
  std::string logits = c.accuracy.logits;
  if (logits.empty() && !label.empty()) logits = FindScoresFor(*block, label);
  tp.accuracy_label = label;
  tp.logits = logits;
  if (!logits.empty()) {
    const VarDesc* lv = block->FindVarRecursive(logits);
    NABLA_ENFORCE(lv != nullptr, kNotFound, c.accuracy.pos.Where(), ": metrics.accuracy.logits '", logits,
                  "' is not a var of the program");
    if (!lv->GetShape().empty() && lv->GetShape().back() > 0) tp.classes = lv->GetShape().back();
  }

  if (c.accuracy.enabled) {
    NABLA_ENFORCE(!logits.empty(), kInvalidArgument, c.accuracy.pos.Where(),
                  ": metrics.accuracy needs the scores to rank: no op reads '", label,
                  "' through a Label slot; set metrics.accuracy.logits");
    NABLA_ENFORCE(block->FindVar(label) != nullptr, kNotFound, c.accuracy.pos.Where(), ": metrics.accuracy.label '",
                  label, "' is not a var of the program");
    // Said here, at the config's key, rather than by the metric's top_k and
    // accuracy ops, which a user never wrote.
    const Shape& ls = block->FindVarRecursive(logits)->GetShape();
    NABLA_ENFORCE(ls.size() == 2, kInvalidArgument, c.accuracy.pos.Where(),
                  ": metrics.accuracy ranks one score row per sample, [batch, classes], but '", logits, "' is ",
                  ShapeToString(ls), ls.size() > 2 ? " (a sequence model's scores); leave metrics.accuracy out" : "");
    NABLA_ENFORCE(ls[1] < 0 || c.accuracy.k <= ls[1], kInvalidArgument, c.accuracy.pos.Where(),
                  ": metrics.accuracy.k = ", c.accuracy.k, " exceeds the ", ls[1], " classes of '", logits, "'");
    tp.accuracy = AppendAccuracy(program, logits, label, c.accuracy.k).correct;
  }
  // Checked on the program as written, before the fusion pass replaces
  // intermediates a config may name.
  {
    const BlockDesc* b = program.Root();
    for (const auto& [names, pos, key] :
         {std::tuple{&c.params, &c.params_pos, "params"}, std::tuple{&c.no_grad, &c.no_grad_pos, "no_grad"}})
      for (const auto& n : *names)
        NABLA_ENFORCE(b->FindVarRecursive(n) != nullptr, kNotFound, pos->Where(), ": ", key, " names '", n,
                      "', which is not a var of the program");
    // The optimizer keeps state beside each parameter across steps.
    for (const auto& n : c.params)
      NABLA_ENFORCE(b->FindVarRecursive(n)->Persistable(), kInvalidArgument, c.params_pos.Where(), ": params names '",
                    n, "', which is not persistable: only a parameter (persistable: true) can be trained");
  }
  PassPipelineOptions po;
  // CPU kernels alone have the fused ops' kernels: fusion on the cpu only.
  ParseDeviceType(c.device.substr(0, c.device.find(':')), &po.device);
  po.fuse = c.fuse;
  if (!logits.empty()) po.keep.insert(logits);
  po.precision = c.precision;
  po.precision_where = c.path;
  po.loss = c.loss;
  po.params = c.params;
  po.no_grad.insert(c.no_grad.begin(), c.no_grad.end());
  po.before_backward = [&](ProgramDesc& p) {
    // Evaluation runs the forward part as it is now: AppendBackward may
    // insert ops into it (copies of overwritten values), so an op count
    // taken here would cut the metric ops off the program after it (the RNN
    // example's eval read the last training batch's accuracy for every eval
    // batch).
    tp.eval = MakeEvalProgram(p, p.Root()->OpSize());
  };
  po.after_backward = [&](const ParamGrads& pg) {
    NABLA_ENFORCE(!pg.empty(), kInvalidArgument, c.loss_pos.Where(), ": no parameter gets a gradient from '", c.loss,
                  "'", c.params.empty() ? " (are the parameters persistable and not stop_gradient?)" : "");
  };
  if (world_size > 1) {
    DataParallelOptions dp;
    dp.world_size = world_size;
    dp.bucket_mb = c.distributed.bucket_mb;
    dp.timeout_s = c.distributed.collective_timeout_s;
    po.data_parallel = dp;
  }
  po.optimizer = c.optimizer;
  const PassPipelineResult pr = ApplyPassPipeline(program, po);
  tp.param_grads = pr.param_grads;
  tp.bf16 = pr.bf16;
  tp.learning_rate = kLearningRateVar;
  InferProgram(program);
  VerifyProgram(program, *CurrentRegistry());
  InferProgram(tp.eval);
  VerifyProgram(tp.eval, *CurrentRegistry());

  std::set<std::string> feeds;
  for (const auto& f : c.data.train.feeds) feeds.insert(f.var);
  for (size_t i = 0; i < program.Size(); ++i) {
    for (const auto& v : program.Block(i)->AllVars()) {
      if (v->Persistable() && !feeds.count(v->Name()) && !IsDataParallelVar(v->Name()))
        tp.persistables.push_back(v->Name());
    }
  }
  std::sort(tp.persistables.begin(), tp.persistables.end());
  return tp;
}

namespace {

// One call of RunTraining, in the parts a reader can follow in order: the
// constructor sets up (world, run folder, device, programs, data, executor),
// Start restores a checkpoint or checks a fresh start, RunEpochs is the
// loop over epochs, Step one optimizer step, Evaluate one pass over the
// eval split, Save and StopForSignal the checkpoints, Finish the summary.
// The members are the run's state, shared by the parts; their names are
// those the parts use.
struct TrainingRun {
  TrainingRun(const RunConfig& config, const RunOverrides& overrides, std::ostream& leader_out, bool out_is_tty);
  RunSummary Run();

  void Start();
  void OpenOutputs(bool out_is_tty);
  void PrintHeader();
  void PlanLoop();
  // Runs epochs until the epoch or step limit or a stop signal.
  void RunEpochs();
  // One optimizer step on batch `batch` of the epoch's `order`; adds its loss
  // and hits to the epoch's and the window's sums.
  void Step(const std::vector<int64_t>& order);
  void EndEpoch();
  EpochStats Evaluate();
  // The signal to stop on, agreed by every rank; 0 to go on.
  int PendingStop();
  void Save(int64_t done_epochs, int64_t done_batches);
  int64_t ReadCorrect(Scope& s);
  RunSummary StoppedBySignal();
  RunSummary Finish();
  RunSummary DryRun();
  void PrintSummary(const std::string& plot_written);

  const RunOverrides& ov;
  const Clock::time_point t0 = Clock::now();
  // Under mpirun every rank trains; only rank 0 speaks (a stream without a
  // buffer drops what the others print).
  const World world;
  std::ostream silent{nullptr};
  std::ostream& out;
  const bool resume;
  // Rank 0 alone writes checkpoints and metrics, so it alone picks the
  // numbered run folder they go to (resume.h).
  const int run;
  const RunConfig c;
  StopSignals stop_signals;
  Device* device = nullptr;
  TrainPrograms tp;
  Split train;
  std::optional<Split> eval;
  int64_t n = 0, bs = 0, ebs = 0, batches = 0;
  uint64_t data_seed = 0;
  int64_t epochs = 0, max_steps = 0;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<Collectives> collectives;
  Scope scope;

  // Where the run is: steps done, the epoch and the batch within it.
  int64_t step = 0, epoch = 0, batch = 0;
  std::string last_checkpoint;
  bool resumed = false;

  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<Progress> progress;
  Scope* eval_scope = nullptr;

  RunSummary summary;
  int64_t start_step = 0;
  int64_t planned = INT64_MAX;
  int64_t samples_run = 0;
  int64_t last_eval_step = -1;
  Clock::time_point loop_start;
  // The epoch's sums (its "train" row, the summary) and the interval's (the
  // log lines and the "step" metric rows); checkpoints record both, so a
  // run resumed mid-epoch or mid-interval reports what an uninterrupted
  // one does.
  double ep_loss = 0;
  int64_t ep_samples = 0, ep_correct = 0;
  double win_loss = 0;
  int64_t win_samples = 0, win_correct = 0;
  Clock::time_point win_start;
  double current_lr = 0;
  int stop_signal = 0;
};

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TrainingRun::TrainingRun(const RunConfig& config, const RunOverrides& overrides, std::ostream& leader_out,
                         bool out_is_tty)
    : ov(overrides),
      world(WorldForRun(config.distributed, config.path)),
      out(world.Leader() ? leader_out : silent),
      resume(overrides.resume || config.checkpoint.resume),
      run(world.Leader() ? ChooseRun(config, resume) : 1),
      c(ForRun(config, run)) {
  // The device is resolved first, so a machine without OpenCL (or a
  // misspelt device) fails before anything is said or loaded, but after the
  // config's plugins: `device:` may name a device plugin's backend that
  // `plugins:` loads. An embedding program may not have set up the host yet
  // (idempotent).
  cpu::InitCpuBackend();
  device = &OpenConfigDevice(c);
  if (run > 1 && !resume) {
    out << "run " << run << ": the configured outputs hold an earlier run, so this one writes to";
    for (const std::string* p : {&c.checkpoint.dir, &c.logging.metrics_file, &c.logging.plot})
      if (!p->empty()) out << " " << *p;
    out << " (--resume continues the newest run)" << std::endl;
  }

  tp = BuildTrainPrograms(c, world.size);
  std::pair<Split, std::optional<Split>> splits = LoadSplits(c, *tp.main.Root(), tp);
  train = std::move(splits.first);
  eval = std::move(splits.second);

  // An epoch may be a fixed number of samples: the first of each epoch's
  // order (a large text corpus then gets an evaluation every N windows).
  n = c.data.samples_per_epoch > 0 ? std::min(c.data.samples_per_epoch, train.data.Size()) : train.data.Size();
  bs = c.data.batch_size;
  ebs = c.data.eval_batch_size > 0 ? c.data.eval_batch_size : bs;
  batches = NumBatches(n, bs, c.data.drop_last);
  NABLA_ENFORCE(batches > 0, kInvalidArgument, c.data.pos.Where(), ": the training set has ", n,
                " samples, fewer than one batch of ", bs, " with drop_last; lower data.batch_size");
  data_seed = c.data.seed.value_or(c.seed);

  epochs = ov.epochs.value_or(c.epochs);
  max_steps = ov.steps.value_or(c.steps);
  if (epochs <= 0) epochs = max_steps > 0 ? 0 : 1;  // 0: no epoch limit

  // threads sizes the executor's arena; GEMMs split inside it (cpu::Gemm),
  // OpenBLAS itself stays at one thread.
  ExecutorOptions eo;
  eo.threads = c.threads;
  eo.seed = c.seed;
  exec = CreateExecutor(c.executor, *device, eo);
  collectives = std::make_unique<Collectives>(world, *exec, c.distributed.collective_timeout_s);

  Start();
  // A dry run writes nothing: it has no values to checkpoint or log.
  if (IsDryRun(*device)) {
    progress = std::make_unique<Progress>(out, "none", c.logging.every_steps);
  } else {
    OpenOutputs(out_is_tty);
  }
  eval_scope = &scope.NewScope();
}

// device: null runs shape inference through the startup program, one
// training step and one evaluation batch (nabla/device_registry.h): a check
// of the config's program and data shapes that computes nothing.
RunSummary TrainingRun::DryRun() {
  const std::vector<int64_t> order = EpochOrder(train.data.Size(), false, 0, 0);
  const int64_t rows = std::min(n, bs);
  for (const auto& f : train.feeds) scope.Var(f.var)->GetTensor() = MakeBatch(f, order, 0, rows, *device);
  exec->Run(tp.main, 0, scope);
  if (eval) {
    const std::vector<int64_t> eval_order = EpochOrder(eval->data.Size(), false, 0, 0);
    const int64_t eval_rows = std::min(eval->data.Size(), ebs);
    for (const auto& f : eval->feeds)
      eval_scope->Var(f.var)->GetTensor() = MakeBatch(f, eval_order, 0, eval_rows, *device);
    exec->Run(tp.eval, 0, *eval_scope);
  }
  out << "dry run on the " << c.device << " device: the startup program, one training step of " << rows << " rows"
      << (eval ? " and one evaluation batch" : "")
      << " ran shape inference through every op; nothing was computed, trained or written" << std::endl;
  summary.world_size = world.size;
  return summary;
}

// The parameters: the startup program's, then --weights, then (resuming)
// every persistable var of the newest checkpoint but the learning rate,
// which follows the config; under mpirun rank 0's, broadcast.
void TrainingRun::Start() {
  std::vector<std::string> feed_vars;
  for (const auto& f : train.feeds) feed_vars.push_back(f.var);
  ProgramDesc startup = BuildStartupProgram(tp.main, feed_vars);
  // Random initializers draw with index 0, the steps with their numbers
  // (Step): neither depends on what else the executor ran.
  RunOptions startup_options;
  startup_options.random_index = 0;
  exec->Run(startup, 0, scope, startup_options);
  if (ov.weights) LoadWeights(*ov.weights, tp.main, scope, *device);

  NABLA_ENFORCE(!resume || !c.checkpoint.dir.empty(), kInvalidArgument, c.path,
                ": --resume needs a checkpoint folder, but the config has no checkpoint.dir");
  // Rank 0 alone reads checkpoints (and checks a fresh run's folder); the
  // others get its parameters and position from the broadcast below.
  if (resume && world.Leader()) {
    if (auto point = FindResumePoint(c.checkpoint.dir, std::cerr)) {
      RestoreCheckpoint(*point, tp.persistables, tp.learning_rate, scope, *device);
      step = point->step;
      epoch = point->epoch;
      batch = point->batch;
      NABLA_ENFORCE(batch <= batches, kInvalidArgument, point->path, ": the checkpoint was taken at batch ", batch,
                    " of an epoch, but an epoch now has ", batches, " batches (did data or batch_size change?)");
      last_checkpoint = point->path;
      resumed = true;
      if (point->sums) {
        ep_loss = point->sums->epoch_loss;
        ep_samples = point->sums->epoch_samples;
        ep_correct = point->sums->epoch_correct;
        win_loss = point->sums->window_loss;
        win_samples = point->sums->window_samples;
        win_correct = point->sums->window_correct;
      }
      out << "resumed from " << point->path << " (step " << step << ", epoch " << epoch << ", batch " << batch << ")"
          << std::endl;
      if (!point->sums && batch > 0) {
        std::cerr << "warning: " << point->path << " predates the metric sums in checkpoints: epoch " << epoch + 1
                  << "'s train loss and accuracy cover only the batches run after this resume" << std::endl;
      }
    } else {
      out << "no checkpoint in " << c.checkpoint.dir << "; starting from scratch" << std::endl;
    }
  } else if (!resume && !c.checkpoint.dir.empty() && world.Leader()) {
    CheckFreshCheckpointDir(c.checkpoint.dir);
  }
  if (world.Distributed()) {
    // Rank 0's parameters and optimizer state (fresh or resumed) and where
    // it resumes; the other ranks contribute zeros to the sum.
    collectives->BroadcastFromRoot(scope, tp.persistables);
    const bool lead = world.Leader();
    // (The others add zeros: a sum that is rank 0's values exactly.)
    auto own = [lead](double v) { return lead ? v : 0.0; };
    std::vector<double> at =
        collectives->Sum({own(static_cast<double>(step)), own(static_cast<double>(epoch)),
                          own(static_cast<double>(batch)), own(resumed ? 1.0 : 0.0), own(ep_loss),
                          own(static_cast<double>(ep_samples)), own(static_cast<double>(ep_correct)), own(win_loss),
                          own(static_cast<double>(win_samples)), own(static_cast<double>(win_correct))});
    step = static_cast<int64_t>(at[0]);
    epoch = static_cast<int64_t>(at[1]);
    batch = static_cast<int64_t>(at[2]);
    resumed = at[3] > 0;
    ep_loss = at[4];
    ep_samples = static_cast<int64_t>(at[5]);
    ep_correct = static_cast<int64_t>(at[6]);
    win_loss = at[7];
    win_samples = static_cast<int64_t>(at[8]);
    win_correct = static_cast<int64_t>(at[9]);
  }

  // A persistable var with no init: (an imported model's parameter) must
  // have come from --weights or a checkpoint by now.
  for (const auto& v : tp.main.Root()->AllVars()) {
    if (!v->Persistable() || v->Init() || !v->Declared() || v->Type() != VarType::kDense) continue;
    const Variable* sv = scope.FindVar(v->Name());
    NABLA_ENFORCE(sv && sv->GetTensor().IsInitialized(), kInvalidArgument, c.path, ": persistable var '", v->Name(),
                  "' of the program has no init: and no value: pass --weights FILE.safetensors");
  }
}

// The checkpoint folder, the metrics file and the progress display.
void TrainingRun::OpenOutputs(bool out_is_tty) {
  // A folder that cannot be made fails the run before its first step.
  if (!c.checkpoint.dir.empty() && world.Leader()) EnsureCheckpointDir(c.checkpoint.dir);
  if (!c.logging.metrics_file.empty() && world.Leader()) {
    if (resumed) DropMetricsAfterStep(c.logging.metrics_file, step);
    metrics = std::make_unique<MetricsWriter>(c.logging.metrics_file, resumed);
  }
  std::string mode = ov.progress.value_or(c.logging.progress);
  if (mode == "auto") mode = out_is_tty ? "bar" : "lines";
  progress = std::make_unique<Progress>(out, mode, c.logging.every_steps);
}

// The plugins the program's ops come from, as `plugins:` records them in a
// program file: "acme 1.0: acme_linear acme_swish; math_ops 0.1.0: mul".
std::string PluginsUsed(const ProgramDesc& program) {
  std::string used;
  for (const PluginRequirement& p : PluginsOf(program)) {
    used += StrCat(used.empty() ? "" : "; ", p.name, p.version.empty() ? "" : " " + p.version, ":");
    for (const std::string& op : p.ops) used += " " + op;
  }
  return used;
}

void TrainingRun::Save(int64_t done_epochs, int64_t done_batches) {
  if (!world.Leader()) return;
  NamedTensors tensors;
  for (const auto& name : tp.persistables) {
    Variable* v = scope.FindVar(name);
    if (v && v->GetTensor().IsInitialized()) tensors.emplace_back(name, v->GetTensor());
  }
  // At an epoch's end (batch 0) the epoch's sums belong to the epoch done,
  // not to the one a resume starts.
  MetricSums sums;
  if (done_batches > 0) {
    sums.epoch_loss = ep_loss;
    sums.epoch_samples = ep_samples;
    sums.epoch_correct = ep_correct;
  }
  sums.window_loss = win_loss;
  sums.window_samples = win_samples;
  sums.window_correct = win_correct;
  std::map<std::string, std::string> meta = MetricSumsMetadata(sums);
  meta["batch"] = std::to_string(done_batches);
  meta["loss"] = c.loss;
  meta["plugins"] = PluginsUsed(tp.main);
  last_checkpoint = SaveCheckpoint(c.checkpoint.dir, step, done_epochs, tensors, meta, c.checkpoint.keep_last);
}

int64_t TrainingRun::ReadCorrect(Scope& s) {
  if (tp.accuracy.empty()) return 0;
  Variable* v = s.FindVar(tp.accuracy);
  NABLA_ENFORCE(v != nullptr, kPreconditionNotMet, "the accuracy metric produced nothing");
  return static_cast<int64_t>(ReadScalar(v->GetTensor(), tp.accuracy));
}

EpochStats TrainingRun::Evaluate() {
  EpochStats st;
  std::vector<int64_t> order = EpochOrder(eval->data.Size(), false, 0, 0);
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t b = 0; b < eval->data.Size(); b += ebs) {
    const int64_t e = std::min(eval->data.Size(), b + ebs);
    st.samples += e - b;
    // Each rank evaluates its shard of the batch; the sums meet below.
    const auto [s0, s1] = ShardOf(b, e, world);
    if (s1 == s0) continue;
    for (const auto& f : eval->feeds) eval_scope->Var(f.var)->GetTensor() = MakeBatch(f, order, s0, s1, *device);
    exec->Run(tp.eval, 0, *eval_scope);
    const double l = ReadScalar(eval_scope->FindVar(c.loss)->GetTensor(), c.loss);
    loss_sum += l * static_cast<double>(s1 - s0);
    correct += ReadCorrect(*eval_scope);
  }
  if (world.Distributed()) {
    std::vector<double> sums = collectives->Sum({loss_sum, static_cast<double>(correct)});
    loss_sum = sums[0];
    correct = static_cast<int64_t>(sums[1]);
  }
  st.loss = st.samples ? loss_sum / static_cast<double>(st.samples) : 0;
  if (!tp.accuracy.empty() && st.samples) st.accuracy = static_cast<double>(correct) / st.samples;
  return st;
}

void TrainingRun::PrintHeader() {
  if (progress->Quiet()) return;
  out << "training " << (c.program_path.empty() ? c.path : c.program_path) << ": " << n << " samples";
  if (n < train.data.Size()) out << " of " << train.data.Size();
  out << ", " << batches << " batches of " << bs << " per epoch";
  if (eval) out << ", " << eval->data.Size() << " eval samples";
  out << ", " << c.optimizer.type << " lr " << c.optimizer.lr << ", " << tp.param_grads.size() << " parameters, "
      << c.executor << " executor";
  if (world.Distributed()) out << ", " << world.size << " data-parallel ranks";
  out << std::endl;
}

void TrainingRun::PlanLoop() {
  summary.run = run;
  summary.checkpoint_dir = c.checkpoint.dir;
  summary.metrics_file = c.logging.metrics_file;
  summary.plot = c.logging.plot;
  start_step = step;
  const int64_t by_epochs = epochs > 0 ? epochs * batches : INT64_MAX;
  const int64_t by_steps = max_steps > 0 ? max_steps : INT64_MAX;
  planned = std::min(by_epochs, by_steps);
  loop_start = Clock::now();
  win_start = Clock::now();
  NABLA_ENFORCE(c.optimizer.schedule.type != "cosine" || planned != INT64_MAX, kInvalidArgument,
                c.optimizer.schedule.pos.Where(), ": a cosine schedule needs a planned number of steps, but neither ",
                "epochs nor steps bounds this run");
  current_lr = c.optimizer.lr;
}

// Checked between steps only, so a checkpoint never holds half a step.
// Under mpirun every rank gets the signal, but not at the same moment: the
// ranks agree on it first, or one would stop while the others wait in its
// next allreduce.
int TrainingRun::PendingStop() {
  const int sig = StopSignals::Pending();
  if (!world.Distributed()) return sig;
  const std::vector<double> any = collectives->Sum({sig == SIGINT ? 1.0 : 0.0, sig != 0 && sig != SIGINT ? 1.0 : 0.0});
  return any[0] > 0 ? SIGINT : any[1] > 0 ? SIGTERM : 0;
}

void TrainingRun::RunEpochs() {
  while ((epochs == 0 || epoch < epochs) && (max_steps == 0 || step < max_steps)) {
    if ((stop_signal = PendingStop()) != 0) break;
    std::vector<int64_t> order = EpochOrder(train.data.Size(), c.data.shuffle, data_seed, epoch);
    for (; batch < batches && (max_steps == 0 || step < max_steps); ++batch) {
      if ((stop_signal = PendingStop()) != 0) break;
      Step(order);
    }
    if (ep_samples > 0) {
      summary.train.loss = ep_loss / ep_samples;
      summary.train.samples = ep_samples;
      summary.train.accuracy.reset();
      if (!tp.accuracy.empty()) summary.train.accuracy = static_cast<double>(ep_correct) / ep_samples;
    }
    if (batch < batches) break;  // the step limit or a signal stopped the epoch part-way
    ++epoch;
    batch = 0;
    EndEpoch();
  }
  progress->Break();
}

void TrainingRun::Step(const std::vector<int64_t>& order) {
  const int64_t b0 = batch * bs, b1 = std::min(n, b0 + bs);
  // Every rank shuffles alike and feeds its shard of the global batch.
  const StepShard shard = TrainShard(b0, b1, world);
  for (const auto& f : train.feeds) {
    scope.Var(f.var)->GetTensor() = MakeBatch(f, order, shard.begin, shard.end, *device);
  }
  if (world.Distributed()) SetGradScale(scope, shard.grad_scale);
  const double lr = ScheduledLearningRate(c.optimizer.lr, c.optimizer.schedule, step, epoch, planned);
  if (lr != current_lr || step == start_step) SetLearningRate(scope, lr);
  current_lr = lr;
  // Random ops (dropout) draw from the step's number, not the executor's
  // count of runs: a resumed run draws as the uninterrupted one did, and
  // evaluation batches (their number follows eval_batch_size) leave the
  // training steps' draws alone. Each data-parallel rank draws its own masks
  // for its own rows instead of every rank repeating rank 0's.
  RunOptions step_options;
  step_options.random_index = static_cast<uint64_t>(step) + 1;
  step_options.random_stream = static_cast<uint64_t>(world.rank);
  exec->Run(tp.main, 0, scope, step_options);
  double loss = ReadScalar(scope.FindVar(c.loss)->GetTensor(), c.loss);
  int64_t correct = ReadCorrect(scope);
  if (world.Distributed()) {
    // The global batch's mean loss and hits, the same on every rank, so
    // all ranks stop together on a bad loss.
    std::vector<double> sums = collectives->Sum(
        {shard.rows ? loss * static_cast<double>(shard.rows) : 0.0, shard.rows ? static_cast<double>(correct) : 0});
    loss = sums[0] / static_cast<double>(b1 - b0);
    correct = static_cast<int64_t>(sums[1]);
  }
  if (!std::isfinite(loss)) {
    progress->Break();
    NABLA_THROW(kRuntime, "the loss '", c.loss, "' is ", std::isnan(loss) ? "NaN" : "infinite", " at step ", step + 1,
                " (epoch ", epoch + 1, ", batch ", batch + 1, " of ", batches,
                "); training stopped and wrote no checkpoint for it; ",
                last_checkpoint.empty() ? std::string("no checkpoint was written before it")
                                        : "the last good checkpoint is " + last_checkpoint,
                " (lower optimizer.lr, set optimizer.clip_global_norm, or check the data)");
  }
  ++step;
  const int64_t m = b1 - b0;
  ep_loss += loss * m;
  ep_samples += m;
  ep_correct += correct;
  win_loss += loss * m;
  win_samples += m;
  win_correct += correct;
  samples_run += m;

  const double elapsed = SecondsSince(loop_start);
  const double sps = elapsed > 0 ? samples_run / elapsed : 0;
  const double steps_per_s = elapsed > 0 ? (step - start_step) / elapsed : 0;
  const double eta = steps_per_s > 0 && planned != INT64_MAX ? (planned - step) / steps_per_s : NAN;
  std::optional<double> ep_acc;
  if (!tp.accuracy.empty()) ep_acc = static_cast<double>(ep_correct) / ep_samples;
  progress->Step(epoch + 1, epochs, batch + 1, batches, step, ep_loss / ep_samples, ep_acc, sps, eta);

  if (step % c.logging.every_steps == 0) {
    if (metrics) {
      MetricRow r;
      r.phase = "step";
      r.epoch = epoch + static_cast<double>(batch + 1) / batches;
      r.step = step;
      r.loss = win_loss / win_samples;
      if (!tp.accuracy.empty()) r.accuracy = static_cast<double>(win_correct) / win_samples;
      r.samples_per_sec = win_samples / std::max(1e-9, SecondsSince(win_start));
      r.elapsed_s = SecondsSince(t0);
      metrics->Write(r);
    }
    win_loss = 0;
    win_samples = win_correct = 0;
    win_start = Clock::now();
  }
  if (!c.checkpoint.dir.empty() && c.checkpoint.every_steps > 0 && step % c.checkpoint.every_steps == 0) {
    Save(batch + 1 == batches ? epoch + 1 : epoch, batch + 1 == batches ? 0 : batch + 1);
  }
}

// After a whole epoch: evaluation, its metric rows, its line, its checkpoint.
void TrainingRun::EndEpoch() {
  progress->Break();
  if (eval) {
    summary.eval = Evaluate();
    last_eval_step = step;
  }
  const double elapsed = SecondsSince(t0);
  if (metrics && ep_samples > 0) {
    MetricRow r;
    r.phase = "train";
    r.epoch = epoch;
    r.step = step;
    r.loss = summary.train.loss;
    r.accuracy = summary.train.accuracy;
    r.samples_per_sec = samples_run / std::max(1e-9, SecondsSince(loop_start));
    r.elapsed_s = elapsed;
    metrics->Write(r);
    if (summary.eval) {
      r.phase = "eval";
      r.loss = summary.eval->loss;
      r.accuracy = summary.eval->accuracy;
      metrics->Write(r);
    }
  }
  if (!progress->Quiet()) {
    out << "epoch " << epoch << (epochs > 0 ? "/" + std::to_string(epochs) : "") << "  train loss "
        << Fixed(summary.train.loss, 4);
    if (summary.train.accuracy) out << "  acc " << Percent(summary.train.accuracy);
    if (summary.eval) {
      out << "  |  eval loss " << Fixed(summary.eval->loss, 4);
      if (summary.eval->accuracy) out << "  acc " << Percent(summary.eval->accuracy);
    }
    if (c.optimizer.schedule.type != "constant") out << "  lr " << current_lr;
    out << "  (" << Duration(elapsed) << ")" << std::endl;
  }
  ep_loss = 0;
  ep_samples = ep_correct = 0;
  if (!c.checkpoint.dir.empty() && c.checkpoint.every_epoch) Save(epoch, 0);
}

RunSummary TrainingRun::StoppedBySignal() {
  if (world.Leader())
    StopForSignal(
        stop_signal, step, step > start_step, c.checkpoint.dir, [&] { Save(epoch, batch); }, last_checkpoint);
  summary.steps = step;
  summary.epochs = epoch;
  summary.last_checkpoint = last_checkpoint;
  summary.stopped_by_signal = stop_signal;
  return summary;
}

RunSummary TrainingRun::Finish() {
  // A run cut short by a step limit still reports (and keeps) where it got.
  if (eval && last_eval_step != step && step > start_step) {
    summary.eval = Evaluate();
    if (metrics) {
      MetricRow r;
      r.phase = "eval";
      r.epoch = epoch + static_cast<double>(batch) / batches;
      r.step = step;
      r.loss = summary.eval->loss;
      r.accuracy = summary.eval->accuracy;
      r.elapsed_s = SecondsSince(t0);
      metrics->Write(r);
    }
  }
  if (!c.checkpoint.dir.empty() && step > start_step) {
    auto all = ListCheckpoints(c.checkpoint.dir);
    if (all.empty() || all.back().step != step) Save(epoch, batch);
  }

  summary.steps = step;
  summary.epochs = epoch;
  summary.seconds = SecondsSince(t0);
  summary.samples_per_sec = samples_run / std::max(1e-9, SecondsSince(loop_start));
  summary.last_checkpoint = last_checkpoint;
  summary.world_size = world.size;
  metrics.reset();  // flush and close before plotting

  std::string plot_written;
  if (!c.logging.plot.empty() && world.Leader() && fs::exists(c.logging.metrics_file)) {
    try {
      PlotMetrics(c.logging.metrics_file, c.logging.plot);
      plot_written = c.logging.plot;
    } catch (const Error& e) {
      // The training succeeded; a missing renderer must not turn it into a failure.
      out << "warning: no plot: " << e.what() << std::endl;
    }
  }
  PrintSummary(plot_written);
  return summary;
}

void TrainingRun::PrintSummary(const std::string& plot_written) {
  out << "\n== summary ==\n";
  out << "steps            " << summary.steps << " (" << (summary.steps - start_step) << " this run), epochs "
      << summary.epochs << "\n";
  out << "time             " << Duration(summary.seconds) << ", " << Fixed(summary.samples_per_sec, 0)
      << " samples/s\n";
  out << "train loss       " << Fixed(summary.train.loss, 4) << "  accuracy " << Percent(summary.train.accuracy)
      << "\n";
  if (summary.eval) {
    out << "eval loss        " << Fixed(summary.eval->loss, 4) << "  accuracy " << Percent(summary.eval->accuracy)
        << "  (" << summary.eval->samples << " samples)\n";
  }
  if (world.Distributed()) {
    out << "world            " << world.size << " ranks (MPI, data parallel), global batch " << bs << "\n";
  }
  out << "GEMM kernels     OpenBLAS " << cpu::BlasCoreName() << " (" << cpu::GemmPolicy() << "), executor "
      << c.executor << "\n";
  // The policy above is float32's; under bf16 the GEMM-bound ops run on oneDNN.
  out << "precision        "
      << (tp.bf16 ? "bf16 mixed precision (the GEMM-bound ops in bfloat16 on oneDNN, float32 accumulation; "
                    "float32 master weights)"
                  : "fp32")
      << "\n";
  if (!summary.last_checkpoint.empty()) out << "checkpoint       " << summary.last_checkpoint << "\n";
  if (!c.logging.metrics_file.empty()) out << "metrics          " << c.logging.metrics_file << "\n";
  if (!plot_written.empty()) out << "plot             " << plot_written << "\n";
  if (summary.eval && summary.eval->accuracy) {
    out << "final eval accuracy: " << Fixed(*summary.eval->accuracy * 100, 2) << " %\n";
  }
  out << std::flush;
}

RunSummary TrainingRun::Run() {
  if (IsDryRun(*device)) return DryRun();
  PrintHeader();
  PlanLoop();
  RunEpochs();
  if (stop_signal != 0) return StoppedBySignal();
  return Finish();
}

}  // namespace

RunSummary RunTraining(const RunConfig& config, const RunOverrides& overrides, std::ostream& out, bool out_is_tty) {
  TrainingRun run(config, overrides, out, out_is_tty);
  return run.Run();
}

}  // namespace nabla::train
