#pragma once
// Variables at run time, in a tree of scopes: a lookup walks up to the root.
// `while` keeps one child scope per iteration for its gradient.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "nabla/export.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla {

class Scope;

class NABLA_API Variable {
 public:
  VarType Type() const { return type_; }
  void SetType(VarType t) { type_ = t; }
  Tensor& GetTensor() { return tensor_; }
  const Tensor& GetTensor() const { return tensor_; }
  std::vector<Tensor>& GetArray() { return array_; }
  const std::vector<Tensor>& GetArray() const { return array_; }
  // Non-owning: the step scopes are children of the scope holding this var.
  std::vector<Scope*>& GetStepScopes() { return step_scopes_; }

 private:
  VarType type_ = VarType::kDense;
  Tensor tensor_;
  std::vector<Tensor> array_;
  std::vector<Scope*> step_scopes_;
};

class NABLA_API Scope {
 public:
  Scope() = default;
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // Finds `name` here or in an ancestor; null when absent.
  Variable* FindVar(const std::string& name) const;
  Variable* FindLocalVar(const std::string& name) const;
  // Returns the local var, creating it when absent.
  Variable* Var(const std::string& name);
  void EraseVars(const std::vector<std::string>& names);
  std::vector<std::string> LocalVarNames() const;

  Scope& NewScope();
  void DeleteScope(Scope* child);
  void DropKids();
  const Scope* Parent() const { return parent_; }

  // Unique over the process's life, where an address is not: a scope made
  // after another was freed may take its address, and a cache of resolved
  // vars keyed by the address would hand out the freed scope's vars.
  uint64_t Id() const { return id_; }
  // Changes whenever a var of this scope is erased (its pointer dies).
  uint64_t Generation() const { return generation_; }

 private:
  static uint64_t NextId();
  const uint64_t id_ = NextId();
  uint64_t generation_ = 0;
  Scope* parent_ = nullptr;  // non-owning
  std::unordered_map<std::string, std::unique_ptr<Variable>> vars_;
  std::vector<std::unique_ptr<Scope>> kids_;
  mutable std::mutex kids_mutex_;  // NewScope may run from concurrent ops
};

}  // namespace nabla
