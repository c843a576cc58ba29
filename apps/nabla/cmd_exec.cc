// `nabla exec PROGRAM.yaml`: runs block 0 once (or --repeat times, timed)
// with tensors fed from .npy files, and writes or prints the fetched vars.
//
// Order matters for the contract "nothing is written when the run fails":
// every input is checked, the whole run completes and every fetch is
// collected before the first file is written.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "command.h"
#include "nabla/backward.h"
#include "nabla/checked.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/feed_fetch.h"
#include "nabla/fusion.h"
#include "nabla/mixed_precision.h"
#include "nabla/npy.h"
#include "nabla/program.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/train.h"
#include "nabla/train/pipeline.h"
#include "nabla/train/weights.h"
#include "tensor_format.h"

namespace nabla::app {
namespace {

struct ExecOptions {
  std::string program;
  std::string backward_loss;
  std::vector<std::string> params;
  std::vector<std::string> no_grad;
  std::vector<std::string> feeds;  // NAME=FILE.npy
  std::vector<std::string> fetches;
  std::string out_dir;
  std::string device = "cpu";
  std::string executor = "taskgraph";
  int threads = 0;
  int64_t seed = 0;
  int repeat = 0;
  int warmup = 0;
  bool fuse = false;
  bool checked = false;
  std::string sgd;  // LR: append one sgd op per parameter after the backward part
  std::string precision = "fp32";
  std::string weights;  // FILE.safetensors: persistable vars
};

struct Feed {
  std::string name;
  std::string path;
  Tensor tensor;
};

float ParseLearningRate(const std::string& text) {
  char* end = nullptr;
  const double lr = std::strtod(text.c_str(), &end);
  NABLA_ENFORCE(!text.empty() && end && *end == '\0' && lr > 0, kInvalidArgument,
                "--sgd: expected a positive learning rate but received '", text, "'");
  return static_cast<float>(lr);
}

// --backward LOSS [--params P,...] [--no-grad V,...]: appends the backward
// part before anything runs, so gradients can be fetched like any var.
void AppendBackwardIfRequested(ProgramDesc& program, const ExecOptions& opts, const Device& device) {
  train::PassPipelineOptions po;
  // The opened device's type: a device plugin that loads on first use has
  // no type by its name before (fusion would have taken it for the cpu).
  po.device = device.Type();
  po.fuse = opts.fuse;
  // Fetched vars (and the loss) must survive fusion.
  po.keep.insert(opts.fetches.begin(), opts.fetches.end());
  po.precision = opts.precision;
  if (opts.backward_loss.empty()) {
    NABLA_ENFORCE(opts.params.empty() && opts.no_grad.empty(), kInvalidArgument,
                  "--params and --no-grad only apply with --backward LOSS");
  }
  po.loss = opts.backward_loss;
  po.params = opts.params;
  po.no_grad.insert(opts.no_grad.begin(), opts.no_grad.end());
  if (!opts.sgd.empty()) {
    // --sgd LR: a whole training step (forward, backward, update) in one
    // run, so `--repeat` times what `nabla run` does per batch with plain sgd.
    train::OptimizerOptions sgd;
    sgd.lr = ParseLearningRate(opts.sgd);
    po.optimizer = sgd;
    po.after_backward = [&](const ParamGrads& pg) {
      NABLA_ENFORCE(!pg.empty(), kInvalidArgument, "--sgd: ", opts.backward_loss, " has no trainable parameter");
    };
  }
  train::ApplyPassPipeline(program, po);
}

// Reads every --feed and checks it against the var the program declares.
std::vector<Feed> ReadFeeds(const ProgramDesc& program, const std::vector<std::string>& specs, Device& device) {
  std::vector<Feed> feeds;
  std::unordered_set<std::string> seen;
  const BlockDesc& root = *program.Root();
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    NABLA_ENFORCE(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), kInvalidArgument,
                  "--feed: expected NAME=FILE.npy but received '", spec, "'");
    Feed feed{spec.substr(0, eq), spec.substr(eq + 1), {}};
    NABLA_ENFORCE(seen.insert(feed.name).second, kInvalidArgument, "--feed ", feed.name, ": fed twice");
    const VarDesc* var = root.FindVar(feed.name);
    NABLA_ENFORCE(var != nullptr, kNotFound, "--feed ", feed.name, ": ", program.SourceFile(), " has no var '",
                  feed.name, "' in block 0; feeds must be declared under vars:");
    feed.tensor = ReadNpy(feed.path, device);
    CheckFeedMatchesVar(program, *var, feed.tensor, feed.path + ": feed '" + feed.name + "'");
    feeds.push_back(std::move(feed));
  }
  return feeds;
}

void CheckFetchesExist(const ProgramDesc& program, const std::vector<std::string>& fetches) {
  std::unordered_set<std::string> seen;
  for (const std::string& name : fetches) {
    NABLA_ENFORCE(!name.empty(), kInvalidArgument, "--fetch: empty var name in the list");
    NABLA_ENFORCE(seen.insert(name).second, kInvalidArgument, "--fetch ", name, ": listed twice");
    NABLA_ENFORCE(program.Root()->FindVar(name) != nullptr, kNotFound, "--fetch ", name, ": ", program.SourceFile(),
                  " has no var '", name, "' in block 0");
  }
}

std::vector<std::pair<std::string, Tensor>> CollectFetches(const ProgramDesc& program, const Scope& scope,
                                                           const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : names) {
    out.emplace_back(name, FetchToHost(program, scope, name, "--fetch " + name));
  }
  return out;
}

// What a dry run knows of each fetch: its dtype and shape.
void PrintDryRunFetches(const Scope& scope, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const Variable* v = scope.FindVar(name);
    NABLA_ENFORCE(v != nullptr && v->Type() == VarType::kDense && v->GetTensor().IsInitialized(), kNotFound, "--fetch ",
                  name, ": the dry run gave it no value (not written by block 0, or not a dense tensor)");
    std::cout << name << ": " << v->GetTensor().DebugString() << "\n";
  }
}

double Milliseconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

void PrintTimes(std::vector<double> ms, int warmup) {
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  const double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  // One unit for all three numbers, picked by the median, so they compare at a glance.
  const bool micro = median < 1.0;
  const double scale = micro ? 1000.0 : 1.0;
  const char* unit = micro ? "us" : "ms";
  char line[200];
  std::snprintf(line, sizeof(line), "%zu runs after %d warm-up: median %.3f %s, min %.3f %s, max %.3f %s per run", n,
                warmup, median * scale, unit, ms.front() * scale, unit, ms.back() * scale, unit);
  std::cout << line << "\n";
}

int RunExec(const ExecOptions& opts) {
  NABLA_ENFORCE(opts.repeat >= 0 && opts.warmup >= 0, kInvalidArgument,
                "--repeat and --warmup must be non-negative but received ", opts.repeat, " and ", opts.warmup);
  NABLA_ENFORCE(opts.warmup == 0 || opts.repeat > 0, kInvalidArgument, "--warmup only applies with --repeat N");
  NABLA_ENFORCE(opts.sgd.empty() || !opts.backward_loss.empty(), kInvalidArgument,
                "--sgd only applies with --backward LOSS");
  if (!opts.sgd.empty()) ParseLearningRate(opts.sgd);
  if (opts.checked) SetCheckedMode(true);
  NABLA_ENFORCE(opts.threads >= 0, kInvalidArgument, "--threads must be non-negative but received ", opts.threads);

  ProgramDesc program = LoadProgram(opts.program);
  Device& device = ResolveDevice(opts.device);
  AppendBackwardIfRequested(program, opts, device);
  const bool dry = IsDryRun(device);
  NABLA_ENFORCE(!dry || (opts.out_dir.empty() && opts.repeat == 0), kInvalidArgument, "--device ", opts.device,
                " is a dry run (shapes and dtypes, no data): --out and --repeat do not apply");
  std::vector<Feed> feeds = ReadFeeds(program, opts.feeds, device);
  CheckFetchesExist(program, opts.fetches);

  ExecutorOptions exec_options;
  exec_options.threads = opts.threads;
  exec_options.seed = static_cast<uint64_t>(opts.seed);
  // --threads sizes the executor's task arena, and every kernel's threads
  // come from it: GEMMs split inside it (cpu::Gemm) with OpenBLAS at one
  // thread, so ops running concurrently never oversubscribe the cores.
  std::unique_ptr<Executor> executor = CreateExecutor(opts.executor, device, exec_options);

  Scope scope;
  std::vector<std::string> fed;
  for (const Feed& f : feeds) fed.push_back(f.name);
  const ProgramDesc startup = BuildStartupProgram(program, fed);
  executor->Run(startup, 0, scope);
  if (!opts.weights.empty()) train::LoadWeights(opts.weights, program, scope, device);
  for (const Feed& f : feeds) scope.Var(f.name)->GetTensor() = f.tensor;
  CheckInputsProvided(program, scope, [&](const std::string& name) {
    const VarDesc* v = program.Root()->FindVar(name);
    return "pass --feed " + name + "=FILE.npy" + (v && v->Persistable() ? ", --weights FILE.safetensors" : "");
  });

  if (opts.repeat == 0) {
    executor->Run(program, 0, scope);
  } else {
    for (int i = 0; i < opts.warmup; ++i) executor->Run(program, 0, scope);
    std::vector<double> ms;
    for (int i = 0; i < opts.repeat; ++i) {
      const auto start = std::chrono::steady_clock::now();
      executor->Run(program, 0, scope);
      device.Synchronize();
      ms.push_back(Milliseconds(std::chrono::steady_clock::now() - start));
    }
    PrintTimes(std::move(ms), opts.warmup);
  }

  if (dry) {
    PrintDryRunFetches(scope, opts.fetches);
    return 0;
  }
  const auto fetched = CollectFetches(program, scope, opts.fetches);
  if (!opts.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opts.out_dir, ec);
    NABLA_ENFORCE(!ec, kExternal, "--out ", opts.out_dir, ": cannot create the folder: ", ec.message());
    for (const auto& [name, tensor] : fetched) {
      WriteNpy((std::filesystem::path(opts.out_dir) / (name + ".npy")).string(), tensor);
    }
  } else {
    for (const auto& [name, tensor] : fetched) {
      std::cout << name << ": " << tensor.DebugString() << "\n" << FormatTensor(tensor) << "\n";
    }
  }
  return 0;
}

}  // namespace

Command ExecCommand() {
  auto opts = std::make_shared<ExecOptions>();
  Command c("exec", "Run block 0 of a program once: feed .npy files, fetch vars to DIR/NAME.npy or the terminal");
  c.Positional("PROGRAM", &opts->program, "The program file (YAML; docs/program-format.md)").Required();
  c.Option("--backward", &opts->backward_loss, "Append the backward part of LOSS before running", "LOSS");
  c.Option("--params", &opts->params, "With --backward: the parameters to differentiate (default: all)", "P,...")
      .Delimiter(',');
  c.Option("--no-grad", &opts->no_grad, "With --backward: vars that get no gradient", "V,...").Delimiter(',');
  c.Flag(
      "--fuse", &opts->fuse,
      "On the cpu, run the fusion passes: bias-add + activation (gelu too), batch_norm + relu, softmax + cross entropy "
      "and attention written with matmul + softmax into flash_attn "
      "before the backward part, and shared grad work after it (a shared weight's transpose, its partial gradients "
      "chained in place, an add's gradient read where it is rather than copied to an operand that is not broadcast, "
      "with --sgd each weight's step taken by the GEMM computing its gradient); other devices "
      "run the program as it is");
  c.Flag("--checked", &opts->checked,
         "Checked mode (as NABLA_CHECKED=1): canaries and a guard page around every host tensor, verified after each "
         "op with its inferred shape and dtype and its unchanged inputs; a kernel writing out of bounds fails its op "
         "(slow: for finding kernel bugs)");
  c.Option("--precision", &opts->precision,
           "fp32 (default) or bf16: mixed precision, casts inserted around bf16 ops (before any backward part)",
           "fp32|bf16");
  c.Option("--sgd", &opts->sgd, "With --backward: append an sgd update of every parameter (a training step)", "LR");
  c.Option("--feed", &opts->feeds, "Set var NAME from a .npy file (repeatable; may set a parameter)", "NAME=FILE.npy");
  c.Option("--weights", &opts->weights,
           "Set persistable vars from a safetensors file (nabla import's weights, a checkpoint)", "FILE.safetensors");
  c.Option("--fetch", &opts->fetches, "Vars to output after the run", "NAME,...").Delimiter(',');
  c.Option("--out", &opts->out_dir, "Write each fetch to DIR/NAME.npy (DIR is created) instead of printing it", "DIR");
  c.Option("--device", &opts->device,
           "Device to run on, a registered one (" + RegisteredDeviceNames() +
               ", or a device plugin's given with --plugin) with an optional index; `nabla devices` lists them; null: "
               "a dry run printing fetched shapes",
           "NAME[:N]");
  c.Option("--executor", &opts->executor, "Executor: taskgraph (default) or sequential (the reference)", "NAME");
  c.Option("--threads", &opts->threads, "Worker threads (0: all cores)", "N");
  c.Option("--seed", &opts->seed, "Base seed for random ops whose own seed is 0", "N");
  c.Option("--repeat", &opts->repeat, "Run N times (feeds reused) and print median/min/max time per run", "N");
  c.Option("--warmup", &opts->warmup, "With --repeat: untimed runs first", "K");
  c.SetRun([opts](const GlobalOptions&) { return RunExec(*opts); });
  return c;
}

}  // namespace nabla::app
