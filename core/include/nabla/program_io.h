#pragma once
// Program files (docs/program-format.md) in YAML. Attributes are typed by the registered
// schemas, so the plugins an op comes from must be loaded first. Every error
// names file:line:col.
#include <string>

#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

// Parses, fills default attributes, creates the vars that only ops produce,
// runs var-type and shape inference, and verifies.
NABLA_API ProgramDesc LoadProgram(const std::string& path);
NABLA_API ProgramDesc ParseProgram(const std::string& yaml_text, const std::string& source_name);
// Writing then reading gives the same program.
NABLA_API std::string ProgramToYaml(const ProgramDesc& program);
// Writes atomically (temp file + rename): a failure leaves `path` untouched.
NABLA_API void SaveProgram(const ProgramDesc& program, const std::string& path);
// Re-runs inference over every op of every block (after a pass added ops).
NABLA_API void InferProgram(ProgramDesc& program);

// Writes `data` to `path` atomically (temp file, fsync, rename).
NABLA_API void WriteFileAtomically(const std::string& path, const std::string& data);

}  // namespace nabla
