#pragma once
// Private: an op with its registry entry, kernels and variables resolved.
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
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
  // Copies of the op's attributes, found without the OpDesc map's string
  // compares. Values, not pointers into the map: a block is reused for an
  // op at the same address with the same version, which a copy of the
  // program can be (same values, other map nodes). Shared, so the per-call
  // copy of DispatchWithFreshOutputs allocates nothing for them.
  std::shared_ptr<const std::vector<std::pair<std::string, Attribute>>> attrs;
  // kernels[device type id][dtype], looked up once for every device type
  // registered at the time; a type registered later, or past the first
  // kCachedDeviceTypes, is looked up per call. Inline, not on the heap: the
  // lookup is on every op's path.
  static constexpr size_t kCachedDeviceTypes = 8;
  std::array<std::array<const KernelInfo*, 6>, kCachedDeviceTypes> kernels{};
  size_t cached_device_types = 0;
  // The op writes a var it also reads and declares no in-place update
  // (mul(X=h) -> h): it gets fresh outputs, moved into place after it ran.
  bool writes_its_input = false;

  // What runtime shape inference saw and left last time: the (shape, dtype)
  // of every input and output var, in slot order, and the op's version.
  // While the inputs and outputs still look so, inference would only set
  // the same shapes again, so Dispatch skips it (in a 32-step RNN, name
  // lookups and error-message prefixes of shape functions were 10 % of a
  // step). Mutable: one op of a block runs on one thread at a time.
  struct ShapeMemo {
    bool valid = false;
    uint64_t op_version = 0;
    std::vector<std::pair<Shape, DType>> seen;  // inputs, then outputs
    size_t n_inputs = 0;                        // how many of `seen` are inputs
  };
  mutable ShapeMemo shape_memo;
  // Eager calls hand over fresh, shapeless output vars every time, so their
  // memo is matched on the inputs alone and, on a match, gives the outputs
  // the shapes and dtypes inference gave them last time.
  bool memo_sets_outputs = false;
  // Whether shape_memo matches the vars now / records them after inference.
  bool ShapesAsMemoized() const;
  void MemoizeShapes() const;

  // Also sets writes_its_input; called once the op and info are set.
  void CacheKernels(const OpRegistry& registry);
  const KernelInfo* Kernel(const OpRegistry& registry, DeviceType device, DType dtype) const {
    const size_t d = static_cast<size_t>(device), t = static_cast<size_t>(dtype);
    return d < cached_device_types && t < kernels[d].size() ? kernels[d][t]
                                                            : registry.FindKernel(op->Type(), device, dtype);
  }

  // Slot and attribute names are a few bytes: compared inline, without the
  // memcmp call std::string's == makes (a kernel finds slots and attributes
  // on every call), eight bytes at a time ("bias_after_scale" is two
  // compares, not sixteen).
  static bool SameName(std::string_view a, std::string_view b) {
    const size_t n = a.size();
    if (n != b.size()) return false;
    const char *p = a.data(), *q = b.data();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t x, y;
      std::memcpy(&x, p + i, 8);
      std::memcpy(&y, q + i, 8);
      if (x != y) return false;
    }
    while (i < n && p[i] == q[i]) ++i;
    return i == n;
  }
  static const PreparedSlot* Find(const std::vector<PreparedSlot>& slots, std::string_view name) {
    for (const auto& s : slots)
      if (SameName(s.name, name)) return &s;
    return nullptr;
  }
  const Attribute* FindAttr(std::string_view name) const {
    if (attrs)
      for (const auto& [n, a] : *attrs)
        if (SameName(n, name)) return &a;
    return nullptr;
  }
};

struct RunContext;
// The executors' one dispatch path (run-time inference, kernel by (device,
// dtype), the kernel) for a prepared op; eager mode calls it too.
void DispatchPrepared(const PreparedOp& prepared, const OpRegistry& registry, Scope& scope, Device& device,
                      const RunContext& run);

}  // namespace nabla
