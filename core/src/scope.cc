#include "nabla/scope.h"

#include <algorithm>
#include <atomic>

namespace nabla {

Scope::~Scope() = default;

uint64_t Scope::NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Variable* Scope::FindLocalVar(const std::string& name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : it->second.get();
}

Variable* Scope::FindVar(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_)
    if (Variable* v = s->FindLocalVar(name)) return v;
  return nullptr;
}

Variable* Scope::Var(const std::string& name) {
  auto& slot = vars_[name];
  if (!slot) slot = std::make_unique<Variable>();
  return slot.get();
}

void Scope::EraseVars(const std::vector<std::string>& names) {
  ++generation_;
  for (const auto& n : names) vars_.erase(n);
}

std::vector<std::string> Scope::LocalVarNames() const {
  std::vector<std::string> names;
  names.reserve(vars_.size());
  for (const auto& [n, v] : vars_) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

Scope& Scope::NewScope() {
  std::lock_guard<std::mutex> lock(kids_mutex_);
  kids_.push_back(std::make_unique<Scope>());
  kids_.back()->parent_ = this;
  return *kids_.back();
}

void Scope::DeleteScope(Scope* child) {
  std::lock_guard<std::mutex> lock(kids_mutex_);
  kids_.erase(std::remove_if(kids_.begin(), kids_.end(), [child](const auto& k) { return k.get() == child; }),
              kids_.end());
}

void Scope::DropKids() {
  std::lock_guard<std::mutex> lock(kids_mutex_);
  kids_.clear();
}

}  // namespace nabla
