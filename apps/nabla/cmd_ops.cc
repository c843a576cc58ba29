// `nabla ops [--json] [--only-plugin]`: what the loaded plugins registered
// (with --only-plugin, only what the --plugin files registered). The JSON is
// built in ops_json.cc, which the Python module's ops_list() shares.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "nabla/attribute.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/train/ops_json.h"
#include "nabla/types.h"

namespace nabla::app {
namespace {

using train::KernelsByDevice;
using train::OpSelection;
using train::RegistryJson;
using train::SelectedOps;

struct OpsOptions {
  bool json = false;
  bool only_plugin = false;
};

std::string SlotFlags(const SlotDef& s) {
  std::string flags;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    flags += flags.empty() ? " (" : ", ";
    flags += name;
  };
  add(s.duplicable, "duplicable");
  add(s.dispensable, "dispensable");
  add(s.no_buffer, "no buffer");
  add(s.no_grad, "no grad");
  if (!flags.empty()) flags += ")";
  return flags;
}

std::string FileAndLine(const Origin& o) {
  if (o.file.empty()) return "-";
  std::string file = o.file;
  size_t slash = file.rfind('/');
  if (slash != std::string::npos) file = file.substr(slash + 1);
  return file + ":" + std::to_string(o.line);
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// One header row per op, aligned as a table, then its slots and attributes.
void PrintTable(const OpRegistry& registry, const OpSelection& selection) {
  const std::vector<std::string> types = SelectedOps(registry, selection);
  size_t type_w = 4, plugin_w = 6, origin_w = 6;
  for (const std::string& type : types) {
    const OpInfo& info = registry.Get(type);
    type_w = std::max(type_w, type.size());
    plugin_w = std::max(plugin_w, info.origin.plugin.size());
    origin_w = std::max(origin_w, FileAndLine(info.origin).size());
  }
  std::cout << std::left << std::setw(type_w) << "OP"
            << "  " << std::setw(plugin_w) << "PLUGIN"
            << "  " << std::setw(origin_w) << "ORIGIN"
            << "  GRAD  KERNELS\n";
  for (const std::string& type : types) {
    const OpInfo& info = registry.Get(type);
    std::string kernels;
    for (const auto& [device, dtypes] : KernelsByDevice(registry, type)) {
      if (!kernels.empty()) kernels += "; ";
      kernels += device + ":";
      for (const std::string& d : dtypes) kernels += " " + d;
    }
    std::cout << std::left << std::setw(type_w) << type << "  " << std::setw(plugin_w)
              << (info.origin.plugin.empty() ? "-" : info.origin.plugin) << "  " << std::setw(origin_w)
              << FileAndLine(info.origin) << "  " << std::setw(4) << (info.HasGradient() ? "yes" : "no") << "  "
              << (kernels.empty() ? "none" : kernels) << "\n";
    if (!info.schema.doc.empty()) std::cout << "    " << FirstLine(info.schema.doc) << "\n";
    for (const SlotDef& s : info.schema.inputs) {
      std::cout << "    in    " << s.name << SlotFlags(s) << (s.doc.empty() ? "" : "  " + s.doc) << "\n";
    }
    for (const SlotDef& s : info.schema.outputs) {
      std::cout << "    out   " << s.name << SlotFlags(s) << (s.doc.empty() ? "" : "  " + s.doc) << "\n";
    }
    for (const AttrDef& a : info.schema.attrs) {
      std::cout << "    attr  " << a.name << ": " << AttrTypeName(a.type) << " = "
                << (a.default_value ? AttrToString(*a.default_value) : std::string("(required)"))
                << (a.doc.empty() ? "" : "  " + a.doc) << "\n";
    }
  }
  size_t plugins = 0;
  for (const auto& p : registry.Plugins()) plugins += selection.Plugin(p.path) ? 1 : 0;
  std::cout << types.size() << " ops from " << plugins << " plugins\n";
}

}  // namespace

Command OpsCommand() {
  auto opts = std::make_shared<OpsOptions>();
  Command c("ops",
            "List every registered op: plugin, origin, slots, attributes with defaults, gradient, kernels per device");
  c.Flag("--json", &opts->json, "Print machine-readable JSON instead of the table");
  c.Flag("--only-plugin", &opts->only_plugin,
         "List only the ops that the --plugin files registered (what a plugin author wants to see)");
  c.SetRun([opts](const GlobalOptions& global) {
    std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
    OpSelection selection;
    if (opts->only_plugin) {
      NABLA_ENFORCE(!global.plugins.empty(), kInvalidArgument,
                    "ops --only-plugin: expected at least one --plugin FILE but received none");
      selection.all = false;
      // Every file loaded already, so each exists and resolves.
      for (const std::string& path : global.plugins) selection.paths.insert(std::filesystem::canonical(path).string());
    }
    if (opts->json) {
      std::cout << RegistryJson(*registry, selection) << "\n";
    } else {
      PrintTable(*registry, selection);
    }
    return 0;
  });
  return c;
}

}  // namespace nabla::app
