#pragma once
// The program IR (docs/program-format.md): ProgramDesc ▸ BlockDesc ▸ OpDesc / VarDesc.
// Descriptions only: nothing here allocates tensors or knows any op.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/error.h"
#include "nabla/export.h"
#include "nabla/types.h"

namespace nabla {

class BlockDesc;
class ProgramDesc;

// Where something came from in a YAML file; line/col are 1-based, 0 = unknown.
struct SourcePos {
  int line = 0;
  int col = 0;
};

// An `init:` entry: the op that initializes a persistable var, with its attrs.
struct InitSpec {
  std::string type;
  AttributeMap attrs;
  SourcePos pos;
};

class NABLA_API VarDesc {
 public:
  explicit VarDesc(std::string name) : name_(std::move(name)) {}

  const std::string& Name() const { return name_; }
  VarType Type() const { return type_; }
  void SetType(VarType t) { type_ = t; }
  DType GetDType() const { return dtype_; }
  void SetDType(DType d) { dtype_ = d; }
  const Shape& GetShape() const { return shape_; }
  void SetShape(Shape s) { shape_ = std::move(s); }
  bool Persistable() const { return persistable_; }
  void SetPersistable(bool p) { persistable_ = p; }
  bool StopGradient() const { return stop_gradient_; }
  void SetStopGradient(bool s) { stop_gradient_ = s; }
  const std::optional<InitSpec>& Init() const { return init_; }
  void SetInit(std::optional<InitSpec> init) { init_ = std::move(init); }
  // True once a dtype was declared or inferred; inference never guesses.
  bool HasDType() const { return has_dtype_; }
  void MarkDTypeKnown(bool known = true) { has_dtype_ = known; }
  // False for vars the loader or a pass created (not written back to YAML
  // unless they carry information the user needs).
  bool Declared() const { return declared_; }
  void SetDeclared(bool d) { declared_ = d; }
  const SourcePos& Pos() const { return pos_; }
  void SetPos(SourcePos p) { pos_ = p; }

 private:
  std::string name_;
  VarType type_ = VarType::kDense;
  DType dtype_ = DType::kFloat32;
  bool has_dtype_ = false;
  Shape shape_;
  bool persistable_ = false;
  bool stop_gradient_ = false;
  bool declared_ = false;
  std::optional<InitSpec> init_;
  SourcePos pos_;
};

// slot name -> argument (var) names. Ordered so writing YAML is deterministic.
using VarNameMap = std::map<std::string, std::vector<std::string>>;

// The next OpDesc version (OpDesc::Version()); thread-safe.
NABLA_API uint64_t NewOpVersion();

class NABLA_API OpDesc {
 public:
  OpDesc() = default;
  OpDesc(std::string type, VarNameMap inputs, VarNameMap outputs, AttributeMap attrs)
      : type_(std::move(type)), inputs_(std::move(inputs)), outputs_(std::move(outputs)), attrs_(std::move(attrs)) {}

  const std::string& Type() const { return type_; }
  void SetType(std::string t) {
    version_ = NewOpVersion();
    type_ = std::move(t);
  }

  const VarNameMap& Inputs() const { return inputs_; }
  const VarNameMap& Outputs() const { return outputs_; }
  VarNameMap& MutableInputs() {
    version_ = NewOpVersion();
    return inputs_;
  }
  VarNameMap& MutableOutputs() {
    version_ = NewOpVersion();
    return outputs_;
  }
  // Argument names of one slot; empty when the slot is absent.
  const std::vector<std::string>& Input(const std::string& slot) const;
  const std::vector<std::string>& Output(const std::string& slot) const;
  bool HasInput(const std::string& slot) const;
  bool HasOutput(const std::string& slot) const;
  void SetInput(const std::string& slot, std::vector<std::string> args) {
    version_ = NewOpVersion();
    inputs_[slot] = std::move(args);
  }
  void SetOutput(const std::string& slot, std::vector<std::string> args) {
    version_ = NewOpVersion();
    outputs_[slot] = std::move(args);
  }
  // Every argument over all slots, in slot order.
  std::vector<std::string> InputArgumentNames() const;
  std::vector<std::string> OutputArgumentNames() const;
  // Renames an argument everywhere it appears in this op.
  void RenameInput(const std::string& from, const std::string& to);
  void RenameOutput(const std::string& from, const std::string& to);

  const AttributeMap& Attrs() const { return attrs_; }
  AttributeMap& MutableAttrs() {
    version_ = NewOpVersion();
    return attrs_;
  }
  bool HasAttr(const std::string& name) const { return attrs_.count(name) != 0; }
  void SetAttr(const std::string& name, Attribute value) {
    version_ = NewOpVersion();
    attrs_[name] = std::move(value);
  }
  const Attribute& GetAttr(const std::string& name) const;
  // Typed access; a missing or differently typed attribute is an error naming
  // the op and the attribute.
  template <typename T>
  const T& Attr(const std::string& name) const {
    const Attribute& a = GetAttr(name);
    const T* v = std::get_if<T>(&a);
    if (!v) ThrowAttrTypeError(name, AttrTypeOf<T>::value);
    return *v;
  }

  const SourcePos& Pos() const { return pos_; }
  void SetPos(SourcePos p) { pos_ = p; }

  // A process-wide unique number, renewed by every mutator (a Mutable*
  // accessor counts as one) and carried by copies, so what is derived from
  // the op at run time (a prepared block, the memo of its inferred shapes)
  // knows when to derive it again: two ops at one address, or one op before
  // and after a change, never share a version unless one copies the other.
  uint64_t Version() const { return version_; }

 private:
  [[noreturn]] void ThrowAttrTypeError(const std::string& name, AttrType wanted) const;

  std::string type_;
  VarNameMap inputs_;
  VarNameMap outputs_;
  AttributeMap attrs_;
  SourcePos pos_;
  uint64_t version_ = NewOpVersion();
};

class NABLA_API BlockDesc {
 public:
  BlockDesc(ProgramDesc* program, int idx, int parent_idx) : program_(program), idx_(idx), parent_idx_(parent_idx) {}
  BlockDesc(const BlockDesc&) = delete;
  BlockDesc& operator=(const BlockDesc&) = delete;

  int Idx() const { return idx_; }
  int ParentIdx() const { return parent_idx_; }
  // Non-owning; null for the root block.
  BlockDesc* Parent() const;
  ProgramDesc* Program() const { return program_; }

  // Vars, in declaration order.
  bool HasVar(const std::string& name) const { return var_index_.count(name) != 0; }
  VarDesc* FindVar(const std::string& name) const;           // this block only
  VarDesc* FindVarRecursive(const std::string& name) const;  // then parents
  bool HasVarRecursive(const std::string& name) const { return FindVarRecursive(name) != nullptr; }
  // Returns the var of this block, creating it when absent.
  VarDesc* Var(const std::string& name);
  void RemoveVar(const std::string& name);
  const std::vector<std::unique_ptr<VarDesc>>& AllVars() const { return vars_; }

  // Ops, in execution order.
  size_t OpSize() const { return ops_.size(); }
  OpDesc* Op(size_t i) const { return ops_.at(i).get(); }
  const std::vector<std::unique_ptr<OpDesc>>& AllOps() const { return ops_; }
  OpDesc* AppendOp(std::unique_ptr<OpDesc> op);
  OpDesc* AppendOp(OpDesc op) { return AppendOp(std::make_unique<OpDesc>(std::move(op))); }
  OpDesc* InsertOp(size_t index, std::unique_ptr<OpDesc> op);
  void RemoveOps(size_t begin, size_t end);  // [begin, end)

 private:
  friend class ProgramDesc;  // re-seats program_ when a program is moved
  ProgramDesc* program_;     // non-owning: the program owns this block
  int idx_;
  int parent_idx_;
  std::vector<std::unique_ptr<VarDesc>> vars_;
  std::unordered_map<std::string, size_t> var_index_;
  std::vector<std::unique_ptr<OpDesc>> ops_;
};

// What `backward:` in a program file records (docs/program-format.md).
struct BackwardInfo {
  std::string loss;
  std::vector<std::pair<std::string, std::string>> param_grads;
};

class NABLA_API ProgramDesc {
 public:
  ProgramDesc();                          // one empty root block
  ProgramDesc(const ProgramDesc& other);  // deep copy
  ProgramDesc& operator=(const ProgramDesc& other);
  ProgramDesc(ProgramDesc&&) noexcept;
  ProgramDesc& operator=(ProgramDesc&&) noexcept;
  ~ProgramDesc();

  size_t Size() const { return blocks_.size(); }
  BlockDesc* Block(size_t i) const { return blocks_.at(i).get(); }
  BlockDesc* Root() const { return blocks_.front().get(); }
  BlockDesc* AppendBlock(int parent_idx);

  // The file the program was read from ("" when built in memory); used to
  // prefix error positions.
  const std::string& SourceFile() const { return source_file_; }
  void SetSourceFile(std::string f) { source_file_ = std::move(f); }
  // "file:line:col" for a position in this program's source (or "" if none).
  std::string Where(const SourcePos& pos) const;

  const std::optional<BackwardInfo>& Backward() const { return backward_; }
  void SetBackward(std::optional<BackwardInfo> b) { backward_ = std::move(b); }

 private:
  std::vector<std::unique_ptr<BlockDesc>> blocks_;
  std::string source_file_;
  std::optional<BackwardInfo> backward_;
};

}  // namespace nabla
