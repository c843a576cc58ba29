#include "nabla/program.h"

#include <algorithm>
#include <atomic>

namespace nabla {

namespace {
const std::vector<std::string>& EmptyArgs() {
  static const std::vector<std::string> empty;
  return empty;
}

std::vector<std::string> Flatten(const VarNameMap& m) {
  std::vector<std::string> out;
  for (const auto& [slot, args] : m) out.insert(out.end(), args.begin(), args.end());
  return out;
}

void Rename(VarNameMap& m, const std::string& from, const std::string& to) {
  for (auto& [slot, args] : m)
    for (auto& a : args)
      if (a == from) a = to;
}
}  // namespace

const std::vector<std::string>& OpDesc::Input(const std::string& slot) const {
  auto it = inputs_.find(slot);
  return it == inputs_.end() ? EmptyArgs() : it->second;
}

const std::vector<std::string>& OpDesc::Output(const std::string& slot) const {
  auto it = outputs_.find(slot);
  return it == outputs_.end() ? EmptyArgs() : it->second;
}

uint64_t NewOpVersion() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool OpDesc::HasInput(const std::string& slot) const { return inputs_.count(slot) != 0; }
bool OpDesc::HasOutput(const std::string& slot) const { return outputs_.count(slot) != 0; }
std::vector<std::string> OpDesc::InputArgumentNames() const { return Flatten(inputs_); }
std::vector<std::string> OpDesc::OutputArgumentNames() const { return Flatten(outputs_); }
void OpDesc::RenameInput(const std::string& from, const std::string& to) {
  version_ = NewOpVersion();
  Rename(inputs_, from, to);
}
void OpDesc::RenameOutput(const std::string& from, const std::string& to) {
  version_ = NewOpVersion();
  Rename(outputs_, from, to);
}

const Attribute& OpDesc::GetAttr(const std::string& name) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) NABLA_THROW(kNotFound, "op '", type_, "' has no attribute '", name, "'");
  return it->second;
}

void OpDesc::ThrowAttrTypeError(const std::string& name, AttrType wanted) const {
  NABLA_THROW(kInvalidArgument, "attribute '", name, "' of op '", type_, "' should be of type ", AttrTypeName(wanted),
              " but received ", AttrTypeName(TypeOf(attrs_.at(name))));
}

BlockDesc* BlockDesc::Parent() const {
  return parent_idx_ < 0 ? nullptr : program_->Block(static_cast<size_t>(parent_idx_));
}

VarDesc* BlockDesc::FindVar(const std::string& name) const {
  auto it = var_index_.find(name);
  return it == var_index_.end() ? nullptr : vars_[it->second].get();
}

VarDesc* BlockDesc::FindVarRecursive(const std::string& name) const {
  for (const BlockDesc* b = this; b != nullptr; b = b->Parent())
    if (VarDesc* v = b->FindVar(name)) return v;
  return nullptr;
}

VarDesc* BlockDesc::Var(const std::string& name) {
  if (VarDesc* v = FindVar(name)) return v;
  var_index_.emplace(name, vars_.size());
  vars_.push_back(std::make_unique<VarDesc>(name));
  return vars_.back().get();
}

void BlockDesc::RemoveVar(const std::string& name) {
  auto it = var_index_.find(name);
  if (it == var_index_.end()) return;
  vars_.erase(vars_.begin() + static_cast<std::ptrdiff_t>(it->second));
  var_index_.clear();
  for (size_t i = 0; i < vars_.size(); ++i) var_index_.emplace(vars_[i]->Name(), i);
}

OpDesc* BlockDesc::AppendOp(std::unique_ptr<OpDesc> op) {
  ops_.push_back(std::move(op));
  return ops_.back().get();
}

OpDesc* BlockDesc::InsertOp(size_t index, std::unique_ptr<OpDesc> op) {
  NABLA_ENFORCE(index <= ops_.size(), kOutOfRange, "op index ", index, " out of range [0, ", ops_.size(), "]");
  auto it = ops_.insert(ops_.begin() + static_cast<std::ptrdiff_t>(index), std::move(op));
  return it->get();
}

void BlockDesc::RemoveOps(size_t begin, size_t end) {
  NABLA_ENFORCE(begin <= end && end <= ops_.size(), kOutOfRange, "op range [", begin, ", ", end, ") out of range [0, ",
                ops_.size(), "]");
  ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(begin), ops_.begin() + static_cast<std::ptrdiff_t>(end));
}

ProgramDesc::ProgramDesc() { blocks_.push_back(std::make_unique<BlockDesc>(this, 0, -1)); }

ProgramDesc::ProgramDesc(const ProgramDesc& other) { *this = other; }

ProgramDesc& ProgramDesc::operator=(const ProgramDesc& other) {
  if (this == &other) return *this;
  blocks_.clear();
  for (const auto& b : other.blocks_) {
    auto nb = std::make_unique<BlockDesc>(this, b->Idx(), b->ParentIdx());
    for (const auto& v : b->AllVars()) *nb->Var(v->Name()) = *v;
    for (const auto& op : b->AllOps()) nb->AppendOp(std::make_unique<OpDesc>(*op));
    blocks_.push_back(std::move(nb));
  }
  source_file_ = other.source_file_;
  backward_ = other.backward_;
  return *this;
}

// Blocks point back at their program, so a move must re-seat them.
ProgramDesc::ProgramDesc(ProgramDesc&& other) noexcept { *this = std::move(other); }

ProgramDesc& ProgramDesc::operator=(ProgramDesc&& other) noexcept {
  if (this == &other) return *this;
  blocks_ = std::move(other.blocks_);
  for (auto& b : blocks_) b->program_ = this;
  other.blocks_.clear();
  other.blocks_.push_back(std::make_unique<BlockDesc>(&other, 0, -1));
  source_file_ = std::move(other.source_file_);
  backward_ = std::move(other.backward_);
  return *this;
}

ProgramDesc::~ProgramDesc() = default;

BlockDesc* ProgramDesc::AppendBlock(int parent_idx) {
  NABLA_ENFORCE(parent_idx >= 0 && static_cast<size_t>(parent_idx) < blocks_.size(), kOutOfRange, "parent block ",
                parent_idx, " does not exist (program has ", blocks_.size(), " blocks)");
  blocks_.push_back(std::make_unique<BlockDesc>(this, static_cast<int>(blocks_.size()), parent_idx));
  return blocks_.back().get();
}

std::string ProgramDesc::Where(const SourcePos& pos) const {
  if (source_file_.empty() && pos.line == 0) return "";
  std::string s = source_file_.empty() ? "<program>" : source_file_;
  if (pos.line > 0) s += StrCat(":", pos.line, ":", pos.col);
  return s;
}

}  // namespace nabla
