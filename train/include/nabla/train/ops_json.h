#pragma once
// The registry as JSON, exactly what `nabla ops --json` prints; the Python
// module's nabla.ops_list() parses the same text. nlohmann/json stays in
// ops_json.cc (seconds of compile time per translation unit).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nabla/op_registry.h"

namespace nabla::train {

// Which ops and plugin records to show: all, or those of the given plugin
// files (compared by canonical path, as the loader records them).
struct OpSelection {
  bool all = true;
  std::set<std::string> paths;
  bool Plugin(const std::string& path) const { return all || paths.count(path) > 0; }
};

// Kernels grouped by device: {"cpu": ["float32", "float64"]}.
std::map<std::string, std::vector<std::string>> KernelsByDevice(const OpRegistry& registry, const std::string& type);

// The op types the selection keeps, sorted.
std::vector<std::string> SelectedOps(const OpRegistry& registry, const OpSelection& selection);

// {"plugins": [...], "ops": [...]}, indented by 2.
std::string RegistryJson(const OpRegistry& registry, const OpSelection& selection);

}  // namespace nabla::train
