#pragma once
// What a kernel sees (its op, tensors and device) and what the registry keeps
// of a kernel (part of nabla/op_registry.h).
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/export.h"
#include "nabla/op_schema.h"
#include "nabla/program.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla {

class Device;
class Scope;
class Variable;

// ---------------------------------------------------------- kernels

struct RunContext;
struct PreparedOp;

// What a kernel sees: its op, its tensors, its device.
class NABLA_API ExecutionContext {
 public:
  ExecutionContext(const OpDesc& op, Scope& scope, Device& device, const RunContext* run);
  // Variables come from `prepared` (resolved once per scope), not from names.
  ExecutionContext(const PreparedOp& prepared, Scope& scope, Device& device, const RunContext* run);

  const OpDesc& Op() const { return op_; }
  bool HasInput(const std::string& slot) const;
  bool HasOutput(const std::string& slot) const;
  size_t InputSize(const std::string& slot) const;
  size_t OutputSize(const std::string& slot) const;
  // The tensor of input `slot`[i]; an absent input is an error naming it.
  const Tensor& Input(const std::string& slot, size_t i = 0) const;
  // Null when the slot is absent or the arg is @EMPTY@ (a gradient nobody needs).
  Tensor* Output(const std::string& slot, size_t i = 0) const;
  std::vector<const Tensor*> MultiInput(const std::string& slot) const;
  std::vector<Tensor*> MultiOutput(const std::string& slot) const;
  // Input slot[i] readable on the host (HostCopy): tensor-valued
  // attributes, read by kernels of any device as shape inference reads them.
  Tensor InputHostTensor(const std::string& slot, size_t i = 0) const;
  Variable* InputVar(const std::string& slot, size_t i = 0) const;
  Variable* OutputVar(const std::string& slot, size_t i = 0) const;
  template <typename T>
  const T& Attr(const std::string& name) const {
    // A prepared op's attributes without the map's string compares (a
    // kernel reads some on every call); a miss or a wrong type takes the
    // OpDesc's path, which reports it.
    if (const Attribute* a = PreparedAttr(name))
      if (const T* v = std::get_if<T>(a)) return *v;
    return op_.Attr<T>(name);
  }

  // Attribute `name` of the op, null when it has none: from the prepared
  // op's copies when there is one (the C ABI's kernel_attr reads through
  // here without knowing the type).
  const Attribute* FindAttr(std::string_view name) const;

  Device& GetDevice() const { return device_; }
  Scope& GetScope() const { return scope_; }
  const RunContext* Run() const { return run_; }
  // Runs block `block_idx` of the running program in `scope` (control flow).
  void RunBlock(int block_idx, Scope& scope) const;
  // The op's `seed` attribute when non-zero, else one derived from the run's
  // seed and this op, so seeded runs are reproducible.
  uint64_t Seed() const;

 private:
  const OpDesc& op_;
  Scope& scope_;
  Device& device_;
  const RunContext* run_;                 // non-owning, may be null
  const PreparedOp* prepared_ = nullptr;  // non-owning, may be null

  const Attribute* PreparedAttr(std::string_view name) const;
};

using KernelFn = std::function<void(const ExecutionContext&)>;
// Picks the dtype a kernel is looked up by; default: the first input tensor.
using KernelDTypeFn = std::function<DType(const ExecutionContext&)>;

struct KernelInfo {
  KernelFn fn;
  Origin origin;
  std::shared_ptr<void> library;  // keeps the plugin mapped while callable
};

}  // namespace nabla
