// The verifier: every op checked against its registered schema. Run after
// loading and after every pass, so a malformed program fails here with the
// op's position instead of inside a kernel.
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/op_registry.h"
#include "nabla/opcheck.h"
#include "source_pos.h"

namespace nabla {
namespace {

using NameSet = std::unordered_set<std::string>;

template <typename Defs, typename NameOf>
std::string JoinNames(const Defs& defs, NameOf name_of) {
  std::string s;
  for (const auto& d : defs) s += (s.empty() ? "" : ", ") + name_of(d);
  return s.empty() ? "(none)" : s;
}

std::string JoinArgs(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : ", ") + a;
  return "[" + s + "]";
}

// True when `idx` is a strict descendant of `ancestor`. A grad block's parent
// is the forward sub-block while its grad op sits in the forward op's block
// (seed 002), so a block attribute may point below a direct child.
bool IsDescendant(const ProgramDesc& program, int idx, int ancestor) {
  int c = idx;
  for (size_t steps = 0; steps <= program.Size() && c >= 0 && static_cast<size_t>(c) < program.Size(); ++steps) {
    c = program.Block(c)->ParentIdx();
    if (c == ancestor) return true;
  }
  return false;
}

void VerifyBlockStructure(const ProgramDesc& program) {
  for (size_t b = 0; b < program.Size(); ++b) {
    const BlockDesc* block = program.Block(b);
    NABLA_ENFORCE(block->Idx() == static_cast<int>(b), kInvalidArgument, "block #", b,
                  " has a wrong index: expected idx ", b, " but received ", block->Idx());
    if (b == 0) {
      NABLA_ENFORCE(block->ParentIdx() == -1, kInvalidArgument, "block 0 is the root: expected parent -1 but received ",
                    block->ParentIdx());
    } else {
      NABLA_ENFORCE(block->ParentIdx() >= 0 && block->ParentIdx() < static_cast<int>(b), kInvalidArgument, "block ", b,
                    " has a bad parent: expected a block index in [0, ", b, ") but received ", block->ParentIdx());
    }
  }
}

// An op's slots and attributes against its schema; `where` starts each message.
void CheckSlots(const std::string& where, const std::vector<SlotDef>& defs, const VarNameMap& slots, const char* kind) {
  for (const auto& [slot, args] : slots) {
    const SlotDef* def = nullptr;
    for (const SlotDef& d : defs)
      if (d.name == slot) def = &d;
    NABLA_ENFORCE(def, kInvalidArgument, where, ": unknown ", kind, " slot: expected one of ",
                  JoinNames(defs, [](const SlotDef& d) { return d.name; }), " but received '", slot, "'");
    NABLA_ENFORCE(def->duplicable || args.size() <= 1, kInvalidArgument, where, ": ", kind, " slot '", slot,
                  "' is not duplicable: expected at most 1 var but received ", args.size(), " ", JoinArgs(args));
  }
  for (const SlotDef& def : defs) {
    if (def.dispensable) continue;
    auto it = slots.find(def.name);
    NABLA_ENFORCE(it != slots.end() && !it->second.empty(), kInvalidArgument, where, ": ", kind, " slot '", def.name,
                  "' is required: expected at least 1 var but received none");
  }
}

void CheckAttrs(const std::string& where, const OpDesc& op, const OpSchema& schema) {
  for (const auto& [name, value] : op.Attrs()) {
    const AttrDef* def = schema.FindAttr(name);
    NABLA_ENFORCE(def, kInvalidArgument, where, ": unknown attribute: expected one of ",
                  JoinNames(schema.attrs, [](const AttrDef& d) { return d.name; }), " but received '", name, "'");
    NABLA_ENFORCE(TypeOf(value) == def->type, kInvalidArgument, where, ": attribute '", name,
                  "' has the wrong type: expected ", AttrTypeName(def->type), " but received ",
                  AttrTypeName(TypeOf(value)), " ", AttrToString(value));
    if (def->checker) {
      try {
        def->checker(value);
      } catch (const Error& e) {
        throw Error(e.kind(), StrCat(where, ": attribute '", name, "' = ", AttrToString(value),
                                     " is rejected by the op's checker: ", e.what()));
      }
    }
  }
  for (const AttrDef& def : schema.attrs) {
    NABLA_ENFORCE(def.default_value.has_value() || op.HasAttr(def.name), kInvalidArgument, where,
                  ": required attribute '", def.name, "' is missing: expected a value of type ", AttrTypeName(def.type),
                  " but received none");
  }
}

class BlockVerifier {
 public:
  BlockVerifier(const ProgramDesc& program, const OpRegistry& registry, const std::vector<NameSet>& produced_in_block,
                size_t b)
      : program_(program), registry_(registry), block_(*program.Block(b)), b_(b) {
    // Outputs of any op of an ancestor block count as defined: a sub-block
    // (and a grad sub-block) runs where everything around it already ran.
    for (int p = block_.ParentIdx(); p >= 0; p = program.Block(p)->ParentIdx()) {
      ancestors_produced_.insert(produced_in_block[p].begin(), produced_in_block[p].end());
    }
    chain_produced_ = ancestors_produced_;
    chain_produced_.insert(produced_in_block[b].begin(), produced_in_block[b].end());
  }

  void Run() {
    for (size_t i = 0; i < block_.OpSize(); ++i) {
      const OpDesc& op = *block_.Op(i);
      where_ = internal::PosPrefix(&program_, op.Pos()) + "op '" + op.Type() + "' (#" + std::to_string(i) +
               " in block " + std::to_string(b_) + ")";
      const OpInfo* info = registry_.Find(op.Type());
      NABLA_ENFORCE(info, kNotFound, where_,
                    ": unknown op type: expected an op registered by a loaded plugin but received '", op.Type(), "'");
      VerifyOpSchema(op, info->schema, where_);
      for (const auto& [name, value] : op.Attrs())
        if (const BlockRef* ref = std::get_if<BlockRef>(&value)) CheckBlockRef(name, ref->idx);
      CheckInputsDefined(op);
      for (const std::string& out : op.OutputArgumentNames()) produced_before_.insert(out);
    }
  }

 private:
  void CheckBlockRef(const std::string& name, int idx) {
    NABLA_ENFORCE(idx >= 0 && static_cast<size_t>(idx) < program_.Size(), kOutOfRange, where_, ": attribute '", name,
                  "' names no block: expected a block index in [0, ", program_.Size(), ") but received ", idx);
    NABLA_ENFORCE(IsDescendant(program_, idx, static_cast<int>(b_)), kInvalidArgument, where_, ": attribute '", name,
                  "' names block ", idx, " whose parent is block ", program_.Block(idx)->ParentIdx(),
                  ": expected a sub-block of block ", b_, " (the op's block)");
  }

  // A var is defined when it was produced by an earlier op of this block or
  // by an op of a parent block, or when it exists and is an external input
  // (declared, persistable, or written by no op in reach: a feed built in
  // memory). An existing var that only a later op produces is read too early.
  void CheckInputsDefined(const OpDesc& op) {
    for (const auto& [slot, args] : op.Inputs()) {
      for (size_t j = 0; j < args.size(); ++j) {
        const std::string& a = args[j];
        if (a == kEmptyVarName || produced_before_.count(a) || ancestors_produced_.count(a)) continue;
        const VarDesc* v = block_.FindVarRecursive(a);
        if (v && (v->Declared() || v->Persistable() || !chain_produced_.count(a))) continue;
        NABLA_ENFORCE(v, kNotFound, where_, ": input ", slot, "[", j, "] '", a,
                      "' is not defined: expected a var declared in block ", b_,
                      " or its parents, or produced by an earlier op, but received an unknown name");
        NABLA_THROW(kInvalidArgument, where_, ": input ", slot, "[", j, "] '", a,
                    "' is read before it is written: expected it declared or produced by an earlier op, but the "
                    "first op producing it comes later");
      }
    }
  }

  const ProgramDesc& program_;
  const OpRegistry& registry_;
  const BlockDesc& block_;
  size_t b_;
  NameSet ancestors_produced_;
  NameSet chain_produced_;
  NameSet produced_before_;
  std::string where_;
};

}  // namespace

void VerifyOpSchema(const OpDesc& op, const OpSchema& schema, const std::string& where) {
  CheckSlots(where, schema.inputs, op.Inputs(), "input");
  CheckSlots(where, schema.outputs, op.Outputs(), "output");
  CheckAttrs(where, op, schema);
}

void VerifyOpAttrs(const OpDesc& op, const OpSchema& schema, const std::string& where) {
  CheckAttrs(where, op, schema);
}

void VerifyProgram(const ProgramDesc& program, const OpRegistry& registry) {
  VerifyBlockStructure(program);
  std::vector<NameSet> produced_in_block(program.Size());
  for (size_t b = 0; b < program.Size(); ++b) {
    for (const auto& op : program.Block(b)->AllOps()) {
      for (const std::string& out : op->OutputArgumentNames())
        if (out != kEmptyVarName) produced_in_block[b].insert(out);
    }
  }
  for (size_t b = 0; b < program.Size(); ++b) BlockVerifier(program, registry, produced_in_block, b).Run();
}

}  // namespace nabla
