#pragma once
// What math_ops' program rewrites after the backward part (FuseGradOps)
// share: who reads and writes each var.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "nabla/plugin.h"

namespace nabla::math_ops {

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

inline bool Touches(const OpDesc& op, const std::string& name) {
  for (const auto& names : {op.InputArgumentNames(), op.OutputArgumentNames()})
    if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  return false;
}

}  // namespace nabla::math_ops
