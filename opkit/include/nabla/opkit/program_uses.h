#pragma once
// What the program rewrites that ops bring for after the backward part
// (OpBuilder::RewritesAfterBackward) ask of a program: who reads and who
// writes each var.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "nabla/plugin.h"

namespace nabla::opkit {

// Every op's reads and writes by name, over every block (sub-blocks read
// outer vars).
inline void CountUses(const ProgramDesc& program, std::unordered_map<std::string, int>& readers,
                      std::unordered_map<std::string, int>& writers) {
  readers.clear();
  writers.clear();
  for (size_t b = 0; b < program.Size(); ++b)
    for (const auto& op : program.Block(b)->AllOps()) {
      for (const auto& n : op->InputArgumentNames()) ++readers[n];
      for (const auto& n : op->OutputArgumentNames()) ++writers[n];
    }
}

// Whether op reads or writes var `name`.
inline bool Touches(const OpDesc& op, const std::string& name) {
  for (const auto& names : {op.InputArgumentNames(), op.OutputArgumentNames()})
    if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  return false;
}

}  // namespace nabla::opkit
