// `nabla backward PROGRAM.yaml --loss NAME`: appends the backward part of
// the loss (core/backward.h) and writes the whole program, with the
// top-level `backward:` key recording the loss and the (param, grad) pairs.
//
// The output is complete before anything is written, and -o goes through
// SaveProgram (temp file + rename), so a failure leaves no half-written file.
#include <iostream>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "command.h"
#include "nabla/backward.h"
#include "nabla/program.h"
#include "nabla/program_io.h"
#include "output_file.h"

namespace nabla::app {
namespace {

struct BackwardOptions {
  std::string program;
  std::string loss;
  std::vector<std::string> params;
  std::vector<std::string> no_grad;
  std::string out;
};

int RunBackward(const BackwardOptions& opts) {
  if (!opts.out.empty()) CheckOutputFolder("-o", opts.out);
  ProgramDesc program = LoadProgram(opts.program);
  AppendBackward(program, opts.loss, opts.params,
                 std::unordered_set<std::string>(opts.no_grad.begin(), opts.no_grad.end()));
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
  c.Positional("PROGRAM", &opts->program, "The program file (YAML, SPEC §2)").Required();
  c.Option("--loss", &opts->loss, "The var to differentiate (one element)", "NAME").Required();
  c.Option("--params", &opts->params, "Parameters to differentiate, in this order (default: all trainable)", "P,...")
      .Delimiter(',');
  c.Option("--no-grad", &opts->no_grad, "Vars that get no gradient", "V,...").Delimiter(',');
  c.Option("-o,--out", &opts->out, "Write to this file (atomically) instead of stdout", "OUT.yaml");
  c.SetRun([opts](const GlobalOptions&) { return RunBackward(*opts); });
  return c;
}

}  // namespace nabla::app
