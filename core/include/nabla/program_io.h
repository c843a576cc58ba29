#pragma once
// Program files (docs/program-format.md) in YAML. Attributes are typed by the registered
// schemas, so the plugins an op comes from must be loaded first. Every error
// names file:line:col.
#include <string>
#include <vector>

#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

// Parses, fills default attributes, creates the vars that only ops produce,
// runs var-type and shape inference, and verifies.
NABLA_API ProgramDesc LoadProgram(const std::string& path);
NABLA_API ProgramDesc ParseProgram(const std::string& yaml_text, const std::string& source_name);
// Writing then reading gives the same program.
NABLA_API std::string ProgramToYaml(const ProgramDesc& program);
// What `plugins:` in a program file records (docs/program-format.md): the
// plugin, and its version, that supplied op types the program uses, so a
// run without it can say what to load.
struct PluginRequirement {
  std::string name;
  std::string version;  // "" when the plugin declares none
  std::vector<std::string> ops;
};
// The plugins, as the registry knows them, that supply the program's op
// types (sorted by name, ops sorted): what saving writes as `plugins:`.
NABLA_API std::vector<PluginRequirement> PluginsOf(const ProgramDesc& program);
// Writes atomically (temp file + rename): a failure leaves `path` untouched.
NABLA_API void SaveProgram(const ProgramDesc& program, const std::string& path);
// Re-runs inference over every op of every block (after a pass added ops).
NABLA_API void InferProgram(ProgramDesc& program);

// Writes `data` to `path` atomically (temp file, fsync, rename).
NABLA_API void WriteFileAtomically(const std::string& path, const std::string& data);

}  // namespace nabla
