#pragma once
// Formatting of YAML source positions for error messages, shared by the
// loader, inference and the verifier so every message starts the same way.
#include <string>

#include "nabla/program.h"

namespace nabla::internal {

// "file:line:col" when the position is known, "" otherwise (programs built in
// memory have no positions).
inline std::string PosString(const ProgramDesc* program, const SourcePos& pos) {
  if (pos.line <= 0) return "";
  std::string file = program && !program->SourceFile().empty() ? program->SourceFile() : "<program>";
  return file + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.col);
}

// "file:line:col: " or "": the start of every message about a located thing,
// which is what the CLI's one-line `nabla: error: FILE:LINE:COL: ...` needs.
inline std::string PosPrefix(const ProgramDesc* program, const SourcePos& pos) {
  std::string s = PosString(program, pos);
  return s.empty() ? s : s + ": ";
}

}  // namespace nabla::internal
