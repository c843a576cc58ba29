// `nabla opcheck [--plugin FILE] [--op TYPE | --all]`: the checks of
// nabla/opcheck.h over a plugin's ops, for its author and for CI. With
// --plugin and without --op, the ops of the --plugin files; --all without
// --plugin, every op loaded (the standard plugins). Each problem is one line
// on stdout; any problem ends the run with one error line and exit 1.
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "command.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opcheck.h"

namespace nabla::app {
namespace {

namespace fs = std::filesystem;

struct OpcheckOptions {
  std::string op;
  bool all = false;
  std::vector<std::string> threads;
  std::string device;
  bool notes = false;
};

int RunOpcheck(const OpcheckOptions& opts, const GlobalOptions& global) {
  NABLA_ENFORCE(!(opts.all && !opts.op.empty()), kInvalidArgument,
                "expected at most one of --op TYPE and --all but received both");
  NABLA_ENFORCE(opts.all || !opts.op.empty() || !global.plugins.empty(), kInvalidArgument,
                "expected --op TYPE, --all, or --plugin FILE (its ops) but received none of them");
  OpCheckOptions options;
  options.device = opts.device;
  if (!opts.threads.empty()) {
    options.threads.clear();
    for (const std::string& t : opts.threads) {
      int n = 0;
      try {
        size_t used = 0;
        n = std::stoi(t, &used);
        if (used != t.size()) n = 0;
      } catch (const std::exception&) {
        n = 0;
      }
      NABLA_ENFORCE(n > 0, kInvalidArgument, "--threads: expected positive thread counts but received '", t, "'");
      options.threads.push_back(n);
    }
  }
  auto registry = CurrentRegistry();
  std::vector<std::string> types;
  if (!opts.op.empty()) {
    registry->Get(opts.op);  // an unknown op is a NotFound error naming it and the plugins
    types.push_back(opts.op);
  } else {
    std::set<std::string> files;
    if (!opts.all)
      for (const std::string& f : global.plugins) files.insert(fs::canonical(f).string());
    for (const std::string& type : registry->OpTypes()) {
      if (!files.empty() && !files.count(registry->Get(type).origin.path)) continue;
      if (IsGradOpOfRegisteredOp(type)) continue;
      types.push_back(type);
    }
    NABLA_ENFORCE(!types.empty(), kNotFound, "opcheck: the selected plugins register no ops");
  }

  size_t problems = 0, runs = 0, notes = 0;
  std::set<std::string> failing;
  for (const std::string& type : types) {
    const OpCheckReport report = CheckOp(type, options);
    runs += static_cast<size_t>(report.runs);
    notes += report.notes.size();
    for (const std::string& p : report.problems) std::cout << p << "\n";
    if (opts.notes || !opts.op.empty())
      for (const std::string& n : report.notes) std::cout << "note: " << n << "\n";
    if (!report.problems.empty()) failing.insert(type);
    problems += report.problems.size();
  }
  std::cout << types.size() << (types.size() == 1 ? " op" : " ops") << ", " << runs << " runs: " << problems
            << (problems == 1 ? " problem" : " problems") << " in " << failing.size()
            << (failing.size() == 1 ? " op" : " ops");
  if (notes > 0 && !opts.notes && opts.op.empty()) std::cout << " (" << notes << " notes: --notes shows them)";
  std::cout << "\n";
  if (!failing.empty()) {
    std::string names;
    for (const std::string& f : failing) names += (names.empty() ? "" : ", ") + f;
    NABLA_THROW(kRuntime, "opcheck found ", problems, problems == 1 ? " problem" : " problems", " in ", names);
  }
  return 0;
}

}  // namespace

Command OpcheckCommand() {
  auto opts = std::make_shared<OpcheckOptions>();
  Command c("opcheck",
            "Check ops against their own registration: inference, inputs, determinism, grad makers, gradients, "
            "edge shapes (for plugin authors)");
  c.Option("--op", &opts->op, "The op type to check", "TYPE");
  c.Flag("--all", &opts->all, "Check every loaded op (default with --plugin: the ops of the --plugin files)");
  c.Option("--threads", &opts->threads, "Thread counts to compare, the first the reference (default 1,2)", "N,...")
      .Delimiter(',');
  c.Option("--device", &opts->device,
           "Check on this device only, a registered one (" + RegisteredDeviceNames() +
               ", or a device plugin's given with --plugin) with an optional index (default: every device the op has "
               "kernels for)",
           "NAME[:N]");
  c.Flag("--notes", &opts->notes, "Also print what was not checked and why");
  c.SetRun([opts](const GlobalOptions& global) { return RunOpcheck(*opts, global); });
  return c;
}

}  // namespace nabla::app
