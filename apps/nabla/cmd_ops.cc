// `nabla ops [--json] [--only-plugin]`: what the loaded plugins registered
// (with --only-plugin, only what the --plugin files registered). The only
// translation unit that includes nlohmann/json (5 s of compile time).
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "nabla/attribute.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/types.h"

namespace nabla::app {
namespace {

using Json = nlohmann::ordered_json;

struct OpsOptions {
  bool json = false;
  bool only_plugin = false;
};

// Which ops and plugin records to show: all, or those of the given plugin
// files (compared by canonical path, as the loader records them).
struct Selection {
  bool all = true;
  std::set<std::string> paths;
  bool Plugin(const std::string& path) const { return all || paths.count(path) > 0; }
};

Json AttrToJson(const Attribute& a) {
  return std::visit(
      [](const auto& v) -> Json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, BlockRef>) {
          return Json{{"block", v.idx}};
        } else {
          return Json(v);
        }
      },
      a);
}

// Kernels grouped by device: {"cpu": ["float32", "float64"]}.
std::map<std::string, std::vector<std::string>> KernelsByDevice(const OpRegistry& registry, const std::string& type) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [device, dtype] : registry.KernelsOf(type)) out[DeviceTypeName(device)].push_back(DTypeName(dtype));
  return out;
}

Json SlotsToJson(const std::vector<SlotDef>& slots) {
  Json out = Json::array();
  for (const SlotDef& s : slots) {
    out.push_back({{"name", s.name},
                   {"doc", s.doc},
                   {"duplicable", s.duplicable},
                   {"dispensable", s.dispensable},
                   {"no_buffer", s.no_buffer}});
  }
  return out;
}

Json OpToJson(const OpRegistry& registry, const OpInfo& info) {
  Json attrs = Json::array();
  for (const AttrDef& a : info.schema.attrs) {
    attrs.push_back({{"name", a.name},
                     {"type", AttrTypeName(a.type)},
                     {"required", !a.default_value.has_value()},
                     {"default", a.default_value ? AttrToJson(*a.default_value) : Json(nullptr)},
                     {"doc", a.doc}});
  }
  Json checks = Json::array();
  for (const GradCheckSpec& spec : info.grad_checks) checks.push_back(spec.name);
  return {{"type", info.schema.type},
          {"doc", info.schema.doc},
          {"plugin", info.origin.plugin},
          {"plugin_path", info.origin.path},
          {"origin", {{"file", info.origin.file}, {"line", info.origin.line}}},
          {"inputs", SlotsToJson(info.schema.inputs)},
          {"outputs", SlotsToJson(info.schema.outputs)},
          {"attrs", attrs},
          {"has_gradient", info.HasGradient()},
          {"traits",
           {{"has_sub_block", info.traits.has_sub_block},
            {"control_flow", info.traits.control_flow},
            {"random", info.traits.random},
            {"array_io", info.traits.array_io},
            {"updates_in_place", info.traits.updates_in_place}}},
          {"kernels", KernelsByDevice(registry, info.schema.type)},
          {"grad_checks", checks}};
}

std::vector<std::string> SelectedOps(const OpRegistry& registry, const Selection& selection) {
  std::vector<std::string> types;
  for (const std::string& type : registry.OpTypes()) {
    if (selection.Plugin(registry.Get(type).origin.path)) types.push_back(type);
  }
  return types;
}

void PrintJson(const OpRegistry& registry, const Selection& selection) {
  Json plugins = Json::array();
  for (const auto& p : registry.Plugins()) {
    if (!selection.Plugin(p.path)) continue;
    plugins.push_back({{"name", p.name}, {"path", p.path}, {"abi", p.abi}, {"ops", p.ops}});
  }
  Json ops = Json::array();
  for (const std::string& type : SelectedOps(registry, selection))
    ops.push_back(OpToJson(registry, registry.Get(type)));
  std::cout << Json{{"plugins", plugins}, {"ops", ops}}.dump(2) << "\n";
}

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
void PrintTable(const OpRegistry& registry, const Selection& selection) {
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
    Selection selection;
    if (opts->only_plugin) {
      NABLA_ENFORCE(!global.plugins.empty(), kInvalidArgument,
                    "ops --only-plugin: expected at least one --plugin FILE but received none");
      selection.all = false;
      // Every file loaded already, so each exists and resolves.
      for (const std::string& path : global.plugins) selection.paths.insert(std::filesystem::canonical(path).string());
    }
    if (opts->json) {
      PrintJson(*registry, selection);
    } else {
      PrintTable(*registry, selection);
    }
    return 0;
  });
  return c;
}

}  // namespace nabla::app
