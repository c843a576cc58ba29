// The only translation unit that includes CLI11: it turns the Command
// descriptions of the cmd_*.cc files into a parser, loads plugins and runs
// the chosen command.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "command.h"
#include "nabla/c_api.h"
#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/plugin.h"

namespace nabla::app {
namespace {

using CommandFactory = Command (*)();

// Every command of `nabla`, in the order --help lists them.
constexpr CommandFactory kCommands[] = {
    RunCommand,  ExecCommand,    BackwardCommand, GraphCommand,  OpsCommand,    GradcheckCommand, OpcheckCommand,
    PlotCommand, DevicesCommand, PluginCommand,   ImportCommand, ExportCommand, GenerateCommand,
};

std::string VersionString() {
  return StrCat("nabla ", NABLA_VERSION, " (OpenBLAS kernels: ", cpu::BlasCoreName(), ", gemm: ", cpu::GemmPolicy(),
                ", bf16: ", cpu::Bf16Policy(), ", plugin C API ", NABLA_C_API_VERSION, ", plugin ABI ",
                ExpectedAbiTag(), ")");
}

void AddOption(CLI::App& sub, const OptionSpec& spec) {
  CLI::Option* opt = std::visit(
      [&](auto* target) -> CLI::Option* {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, bool>) {
          return sub.add_flag(spec.names, *target, spec.help);
        } else {
          return sub.add_option(spec.names, *target, spec.help);
        }
      },
      spec.target);
  // CLI11 2.1 converts int64 options with strtoll, whose overflow clamps:
  // --seed 99999999999999999999 ran as 9223372036854775807 (an int option
  // is checked, an int64 one was not).
  if (std::holds_alternative<int64_t*>(spec.target))
    opt->check(CLI::Validator(
        [](std::string& text) -> std::string {
          const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
          int64_t v = 0;
          const auto [end, ec] = std::from_chars(begin, text.data() + text.size(), v);
          if (ec == std::errc::result_out_of_range)
            return StrCat("value ", text, " lies outside the 64-bit integers [", INT64_MIN, ", ", INT64_MAX, "]");
          return "";
        },
        ""));
  if (!spec.value_name.empty()) opt->type_name(spec.value_name);
  if (spec.required) opt->required();
  if (spec.delimiter != '\0') opt->delimiter(spec.delimiter);
  if (!spec.choices.empty()) opt->check(CLI::IsMember(spec.choices));
}

// CLI11's messages may span lines; the contract is one line on stderr.
std::string Usage(const CLI::ParseError& e) {
  std::string msg = e.what();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  while (!msg.empty() && msg.back() == ' ') msg.pop_back();
  return msg + " (run 'nabla --help' for usage)";
}

// The word in the command's place: the first argument that is neither an
// option nor the value of the global --plugin option.
std::string FirstPositional(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--plugin") {
      ++i;
    } else if (!arg.empty() && arg[0] != '-') {
      return arg;
    }
  }
  return "";
}

}  // namespace

int RunCli(int argc, char** argv) {
  CLI::App app("nabla: a deep-learning runtime whose operators live in plugins", "nabla");
  app.require_subcommand(1);
  // Lets global options such as --plugin follow the command name.
  app.fallthrough();
  app.set_version_flag("--version", VersionString, "Print the version, the BLAS kernels in use and the plugin ABI");

  GlobalOptions global;
  // One FILE per --plugin: CLI11 lets a list option take every word after it,
  // so `nabla run --plugin P run.yaml` lost the config to --plugin.
  app.add_option("--plugin", global.plugins,
                 "Load this plugin after the standard ones (repeatable; NABLA_PLUGIN_PATH adds folders)")
      ->type_name("FILE")
      ->allow_extra_args(false);
  app.add_flag("--strict-plugins", global.strict_plugins,
               "A plugin in the standard folder or NABLA_PLUGIN_PATH that does not load is an error (default: "
               "skipped with a warning)");

  std::vector<Command> commands;
  std::vector<CLI::App*> subs;
  for (CommandFactory factory : kCommands) {
    commands.push_back(factory());
    const Command& c = commands.back();
    CLI::App* sub = app.add_subcommand(c.Name(), c.Description());
    for (const OptionSpec& spec : c.Options()) AddOption(*sub, spec);
    subs.push_back(sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string command = FirstPositional(argc, argv);
    if (!command.empty() &&
        std::none_of(commands.begin(), commands.end(), [&](const Command& c) { return c.Name() == command; })) {
      // CLI11 would only say "A subcommand is required".
      std::string names;
      for (const Command& c : commands) names += (names.empty() ? "" : ", ") + c.Name();
      NABLA_THROW(kInvalidArgument, "unknown command '", command, "': expected one of ", names,
                  " (run 'nabla --help' for usage)");
    }
    NABLA_THROW(kInvalidArgument, Usage(e));
  }

  for (size_t i = 0; i < commands.size(); ++i) {
    if (!subs[i]->parsed()) continue;
    if (commands[i].NeedsPlugins()) {
      PluginManager& plugins = PluginManager::Instance();
      plugins.LoadDefaults(global.strict_plugins);
      for (const std::string& path : global.plugins) plugins.Load(path);
    }
    return commands[i].Run(global);
  }
  NABLA_THROW(kInvalidArgument, "no command given (run 'nabla --help' for usage)");
}

}  // namespace nabla::app
