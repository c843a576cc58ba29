#include "nabla/train/ops_json.h"

#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

#include "nabla/attribute.h"
#include "nabla/types.h"

namespace nabla::train {
namespace {

using Json = nlohmann::ordered_json;

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

Json SlotsToJson(const std::vector<SlotDef>& slots) {
  Json out = Json::array();
  for (const SlotDef& s : slots) {
    out.push_back({{"name", s.name},
                   {"doc", s.doc},
                   {"duplicable", s.duplicable},
                   {"dispensable", s.dispensable},
                   {"no_buffer", s.no_buffer},
                   {"no_grad", s.no_grad}});
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
            {"collective", info.traits.collective},
            {"updates_in_place", info.traits.updates_in_place},
            {"dtype_cast", info.traits.dtype_cast},
            {"moves_data", info.traits.moves_data},
            {"precision", OpPrecisionName(info.traits.precision)},
            {"bf16_float32_inputs", info.traits.bf16_float32_inputs}}},
          {"kernels", KernelsByDevice(registry, info.schema.type)},
          {"grad_checks", checks}};
}

}  // namespace

std::map<std::string, std::vector<std::string>> KernelsByDevice(const OpRegistry& registry, const std::string& type) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [device, dtype] : registry.KernelsOf(type)) out[DeviceTypeName(device)].push_back(DTypeName(dtype));
  return out;
}

std::vector<std::string> SelectedOps(const OpRegistry& registry, const OpSelection& selection) {
  std::vector<std::string> types;
  for (const std::string& type : registry.OpTypes()) {
    if (selection.Plugin(registry.Get(type).origin.path)) types.push_back(type);
  }
  return types;
}

std::string RegistryJson(const OpRegistry& registry, const OpSelection& selection) {
  Json plugins = Json::array();
  for (const auto& p : registry.Plugins()) {
    if (!selection.Plugin(p.path)) continue;
    plugins.push_back({{"name", p.name}, {"path", p.path}, {"abi", p.abi}, {"ops", p.ops}});
  }
  Json ops = Json::array();
  for (const std::string& type : SelectedOps(registry, selection))
    ops.push_back(OpToJson(registry, registry.Get(type)));
  return Json{{"plugins", plugins}, {"ops", ops}}.dump(2);
}

}  // namespace nabla::train
