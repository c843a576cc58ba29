#pragma once
// A `nabla` command described without CLI11: CLI11 costs ~12 s of compile
// time per translation unit, so only cli.cc includes it and
// turns these descriptions into a parser.
//
// Adding a command is one new file and one line in cli.cc's kCommands:
//
//   // cmd_hello.cc
//   Command HelloCommand() {
//     auto name = std::make_shared<std::string>();
//     Command c("hello", "Greets NAME");
//     c.Positional("NAME", name.get(), "who to greet").Required();
//     c.SetRun([name](const GlobalOptions&) { std::cout << "hi " << *name << "\n"; return 0; });
//     return c;
//   }
//
// The storage an option writes into must outlive parsing: keep it in a
// shared_ptr captured by the run function, as above.
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace nabla::app {

// "cpu, null, opencl": the device backends this binary registered (they
// register when their library loads, before main), for help texts.
std::string RegisteredDeviceNames();

// Options that belong to `nabla` itself and apply to every command.
struct GlobalOptions {
  std::vector<std::string> plugins;  // --plugin FILE, in order
  bool strict_plugins = false;       // --strict-plugins: a plugin folder's bad file is an error
};

struct OptionSpec {
  using Target = std::variant<bool*, int*, int64_t*, double*, std::string*, std::vector<std::string>*>;
  std::string names;  // "--out", "-o,--out", or a positional such as "PROGRAM"
  std::string help;
  Target target;           // non-owning; see the note at the top
  std::string value_name;  // shown in --help, e.g. "NAME=FILE.npy"
  bool required = false;
  char delimiter = '\0';  // lists: also split each value on it (--fetch a,b)
  std::vector<std::string> choices;
};

class Command {
 public:
  // Runs the command after parsing (and after plugins are loaded); returns
  // the exit code. Failures are thrown as nabla::Error.
  using RunFn = std::function<int(const GlobalOptions&)>;

  Command(std::string name, std::string description) : name_(std::move(name)), description_(std::move(description)) {}

  Command& Positional(const std::string& name, std::string* target, const std::string& help) {
    return Add(name, target, help, name);
  }
  Command& Flag(const std::string& names, bool* target, const std::string& help) {
    return Add(names, target, help, "");
  }
  template <typename T>
  Command& Option(const std::string& names, T* target, const std::string& help, const std::string& value_name) {
    return Add(names, target, help, value_name);
  }
  // Modifiers of the option added last.
  Command& Required() {
    options_.back().required = true;
    return *this;
  }
  Command& Delimiter(char c) {
    options_.back().delimiter = c;
    return *this;
  }
  Command& Choices(std::vector<std::string> choices) {
    options_.back().choices = std::move(choices);
    return *this;
  }
  // Commands that never look at ops or devices (plot, plugin new) skip plugin loading.
  Command& WithoutPlugins() {
    needs_plugins_ = false;
    return *this;
  }
  Command& SetRun(RunFn run) {
    run_ = std::move(run);
    return *this;
  }

  const std::string& Name() const { return name_; }
  const std::string& Description() const { return description_; }
  const std::vector<OptionSpec>& Options() const { return options_; }
  bool NeedsPlugins() const { return needs_plugins_; }
  int Run(const GlobalOptions& global) const { return run_(global); }

 private:
  Command& Add(const std::string& names, OptionSpec::Target target, const std::string& help,
               const std::string& value_name) {
    OptionSpec spec;
    spec.names = names;
    spec.help = help;
    spec.target = target;
    spec.value_name = value_name;
    options_.push_back(std::move(spec));
    return *this;
  }

  std::string name_;
  std::string description_;
  std::vector<OptionSpec> options_;
  bool needs_plugins_ = true;
  RunFn run_;
};

// Parses argv, loads plugins and runs the chosen command. Returns the exit
// code; throws nabla::Error for failures (usage errors are kInvalidArgument).
int RunCli(int argc, char** argv);

// One factory per command file.
Command OpsCommand();        // cmd_ops.cc
Command ExecCommand();       // cmd_exec.cc
Command RunCommand();        // cmd_run.cc
Command PlotCommand();       // cmd_run.cc
Command GenerateCommand();   // cmd_generate.cc
Command DevicesCommand();    // cmd_devices.cc
Command BackwardCommand();   // cmd_backward.cc
Command GraphCommand();      // cmd_graph.cc
Command GradcheckCommand();  // cmd_gradcheck.cc
Command OpcheckCommand();    // cmd_opcheck.cc
Command PluginCommand();     // cmd_plugin.cc
Command ImportCommand();     // cmd_import.cc
Command ExportCommand();     // cmd_export.cc

}  // namespace nabla::app
