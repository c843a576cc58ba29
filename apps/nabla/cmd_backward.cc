// `nabla backward PROGRAM.yaml --loss NAME`: appends the backward part of
// the loss (core/backward.h) and writes the whole program, with the
// top-level `backward:` key recording the loss and the (param, grad) pairs.
// --data-parallel N also runs the data-parallel pass (train/data_parallel.h),
// so the program shows the gradient allreduces N ranks would run.
//
// The output is complete before anything is written, and -o goes through
// SaveProgram (temp file + rename), so a failure leaves no half-written file.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "command.h"
#include "nabla/backward.h"
#include "nabla/error.h"
#include "nabla/fusion.h"
#include "nabla/mixed_precision.h"
#include "nabla/program.h"
#include "nabla/program_io.h"
#include "nabla/train/data_parallel.h"
#include "nabla/train/pipeline.h"
#include "output_file.h"

namespace nabla::app {
namespace {

struct BackwardOptions {
  std::string program;
  std::string loss;
  std::vector<std::string> params;
  std::vector<std::string> no_grad;
  std::string out;
  int data_parallel = -1;        // -1: not asked for, no collectives
  std::string bucket_mb = "25";  // MiB, parsed here (options take no doubles)
  std::string precision = "fp32";
  bool fuse = false;
};

int RunBackward(const BackwardOptions& opts) {
  if (!opts.out.empty()) CheckOutputFolder("-o", opts.out);
  ProgramDesc program = LoadProgram(opts.program);
  NABLA_ENFORCE(opts.data_parallel == -1 || opts.data_parallel >= 1, kInvalidArgument,
                "--data-parallel must be a rank count >= 1, but received ", opts.data_parallel);
  char* end = nullptr;
  const double bucket_mb = std::strtod(opts.bucket_mb.c_str(), &end);
  NABLA_ENFORCE(!opts.bucket_mb.empty() && *end == '\0' && bucket_mb >= 0, kInvalidArgument,
                "--bucket-mb must be a number of MiB >= 0, but received '", opts.bucket_mb, "'");
  // The passes in `nabla run`'s order on the cpu (fuse: true), so the
  // program shown is the one that trains, up to the optimizer `nabla run`
  // appends.
  train::PassPipelineOptions po;
  po.fuse = opts.fuse;
  po.precision = opts.precision;
  po.loss = opts.loss;
  po.params = opts.params;
  po.no_grad.insert(opts.no_grad.begin(), opts.no_grad.end());
  if (opts.data_parallel >= 1) {
    train::DataParallelOptions dp;
    dp.world_size = opts.data_parallel;
    dp.bucket_mb = bucket_mb;
    po.data_parallel = dp;
  }
  train::ApplyPassPipeline(program, po);
  if (opts.out.empty()) {
    std::cout << ProgramToYaml(program);
    std::cout.flush();
  } else {
    SaveProgram(program, opts.out);
  }
  return 0;
}

}  // namespace

Command BackwardCommand() {
  auto opts = std::make_shared<BackwardOptions>();
  Command c("backward", "Append the backward part of a loss to a program and write the whole program");
  c.Positional("PROGRAM", &opts->program, "The program file (YAML; docs/program-format.md)").Required();
  c.Option("--loss", &opts->loss, "The var to differentiate (one element)", "NAME").Required();
  c.Option("--params", &opts->params, "Parameters to differentiate, in this order (default: all trainable)", "P,...")
      .Delimiter(',');
  c.Option("--no-grad", &opts->no_grad, "Vars that get no gradient", "V,...").Delimiter(',');
  c.Option("--data-parallel", &opts->data_parallel,
           "Insert the gradient allreduces (and 1/N scaling) of N data-parallel ranks", "N");
  c.Option("--bucket-mb", &opts->bucket_mb, "With --data-parallel: gradient bucket size in MiB (0: one per gradient)",
           "MB");
  c.Option("--precision", &opts->precision,
           "fp32 (default) or bf16: mixed precision, casts inserted around bf16 ops (before any backward part)",
           "fp32|bf16");
  c.Flag("--fuse", &opts->fuse,
         "Run the fusion passes as `nabla run` does on the cpu: op chains before the backward part, shared grad "
         "work (a weight's transpose, its partial gradients chained in place, an add's gradient read where it is) "
         "after it; the result is a cpu "
         "program");
  c.Option("-o,--out", &opts->out, "Write to this file (atomically) instead of stdout", "OUT.yaml");
  c.SetRun([opts](const GlobalOptions&) { return RunBackward(*opts); });
  return c;
}

}  // namespace nabla::app
