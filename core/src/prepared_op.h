#pragma once
// Private: an op with its registry entry, kernels and variables resolved.
#include <array>
#include <string>
#include <vector>

#include "nabla/op_registry.h"
#include "nabla/scope.h"

namespace nabla {

struct PreparedSlot {
  std::string name;
  std::vector<Variable*> vars;  // null for @EMPTY@ or a var that did not exist yet
};

struct PreparedOp {
  const OpDesc* op = nullptr;
  const OpInfo* info = nullptr;
  std::vector<PreparedSlot> inputs, outputs;
  // kernels[device][dtype], looked up once.
  std::array<std::array<const KernelInfo*, 5>, 2> kernels{};

  static const PreparedSlot* Find(const std::vector<PreparedSlot>& slots, const std::string& name) {
    for (const auto& s : slots)
      if (s.name == name) return &s;
    return nullptr;
  }
};

struct RunContext;
// The executors' one dispatch path (run-time inference, kernel by (device,
// dtype), the kernel) for a prepared op; eager mode calls it too.
void DispatchPrepared(const PreparedOp& prepared, const OpRegistry& registry, Scope& scope, Device& device,
                      const RunContext& run);

}  // namespace nabla
