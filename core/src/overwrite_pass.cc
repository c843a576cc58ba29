#include "overwrite_pass.h"

#include <algorithm>
#include <exception>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nabla/backward.h"

namespace nabla {
namespace {

// math_ops' assign: copies X into Out; its gradient passes Out@GRAD on.
constexpr const char* kAssignOp = "assign";
// Seed 002: an op that owns a block names it in this attribute.
constexpr const char* kSubBlockAttr = "sub_block";
// y@VER@1: a name no user var and no gradient var (@GRAD) takes.
constexpr const char* kVersionInfix = "@VER@";

using NameSet = std::unordered_set<std::string>;

// One argument of one op: where a version is named.
struct ArgRef {
  std::vector<std::string>* args;  // non-owning: a slot vector of an op of the block
  size_t i;
  int sub_block;  // the block the op owns (its body names the var too), or -1
  int op;         // the op's index in the block; -1 for a copy the pass made
  bool input;
};

// One value a var holds in a block: written by op `writer` (-1: the value
// the block starts with), read by `readers` until the next write.
struct Version {
  int writer = -1;
  std::vector<int> readers;
  std::vector<ArgRef> refs;
  std::vector<const OpDesc*> copies;  // non-owning: copies of this value the pass made (also readers)
  std::vector<int> in_place;          // ops that update this value in place (SplitBeforeInPlace)
  bool writer_split = false;          // the writer writes a copy now
};

class OverwritePass {
 public:
  OverwritePass(ProgramDesc& program, const OpRegistry& registry, NameSet* no_grad, NameSet targets)
      : program_(program), registry_(registry), no_grad_(no_grad), targets_(std::move(targets)) {}

  // `carried`: for a sub-block, the vars its op both reads and writes (the
  // step scope saves their value before the step); null for the root.
  void Run(BlockDesc& block, const NameSet* carried) {
    const bool root = carried == nullptr;
    std::unordered_map<std::string, std::vector<Version>> versions;
    std::vector<std::pair<size_t, std::unique_ptr<OpDesc>>> copies;  // (insert before op, copy)
    std::vector<std::string> order;                                  // first-mention order: deterministic names
    for (size_t i = 0; i < block.OpSize(); ++i) {
      OpDesc& op = *block.Op(i);
      const int sub = SubBlockOf(op, registry_);
      const OpInfo* info = registry_.Find(op.Type());
      // A loop or branch hands its carried vars on itself; an optimizer
      // updates its parameter on purpose: neither write is a new version.
      const bool in_place_ok = sub >= 0 || (info != nullptr && info->traits.updates_in_place);
      auto chain = [&](const std::string& a) -> std::vector<Version>& {
        auto [it, fresh] = versions.try_emplace(a);
        if (fresh) {
          order.push_back(a);
          it->second.emplace_back();
        }
        return it->second;
      };
      std::vector<std::string> reads = op.InputArgumentNames();
      for (auto& [slot, args] : op.MutableInputs())
        for (size_t k = 0; k < args.size(); ++k) {
          if (!Tracked(block, args[k])) continue;
          Version& v = chain(args[k]).back();
          if (v.readers.empty() || v.readers.back() != static_cast<int>(i)) v.readers.push_back(static_cast<int>(i));
          v.refs.push_back(ArgRef{&args, k, sub, static_cast<int>(i), true});
        }
      for (auto& [slot, args] : op.MutableOutputs())
        for (size_t k = 0; k < args.size(); ++k) {
          if (!Tracked(block, args[k])) continue;
          const bool first_mention = versions.count(args[k]) == 0;
          std::vector<Version>& c = chain(args[k]);
          // An op that owns a block may leave any output as it was (a branch
          // not taken, a loop that never runs): its outputs continue the
          // value they had, and its grad op hands their gradients on in place.
          // Unless they had none: a var of this block (or an undeclared one
          // in the root) that nothing mentioned yet starts here.
          bool had_value =
              !first_mention ||
              (root ? block.FindVar(args[k]) != nullptr && block.FindVar(args[k])->Declared() : !block.HasVar(args[k]));
          bool in_place = (sub >= 0 && had_value) || std::find(reads.begin(), reads.end(), args[k]) != reads.end();
          if (!(in_place_ok && in_place)) {
            c.emplace_back();
            c.back().writer = static_cast<int>(i);
          } else {
            SplitBeforeInPlace(block, args[k], c.back(), static_cast<int>(i), &copies);
          }
          c.back().refs.push_back(ArgRef{&args, k, sub, static_cast<int>(i), false});
        }
    }

    std::vector<std::unique_ptr<OpDesc>> front, back;
    for (const std::string& name : order) {
      std::vector<Version>& vs = versions.at(name);
      if (vs.size() < 2) continue;
      const size_t last = vs.size() - 1;
      const VarDesc* desc = block.FindVarRecursive(name);
      const bool outer = !root && !block.HasVar(name);
      const bool grad = WantsGrad(desc, name);
      // The value the root block starts with (fed, a parameter) is read and
      // overwritten, and needs its gradient: x@GRAD names the gradient of
      // that value, as a PyTorch leaf's .grad. It keeps the name x for
      // --feed and is copied aside at the start; the last value is copied
      // back into x at the end of the forward ops, for fetches.
      // Readers that SplitBeforeInPlace moved to a copy read it through the copy.
      const bool v0_read = !vs[0].readers.empty() || !vs[0].copies.empty();
      const bool fed_value = root && grad && v0_read;
      // The version a grad op finds under the plain name when it runs.
      const size_t resolved = fed_value ? vs.size() : outer ? 0 : last;
      for (size_t j = 1; j <= last; ++j) {
        if (j == resolved) continue;
        bool rename = grad || ValueNeeded(block, vs[j], name);
        if (outer && j == last) {
          // An outer var's new value that no grad op of the block reads or
          // writes the gradient of keeps the plain name: its gradient is the
          // one handed in from outside, as the loop's machinery expects. A
          // var that is not carried is found outside, where the value is the
          // step's own in the one step its gradient is not zero.
          bool read = RelevantReader(block, vs[j], name);
          bool value = carried->count(name) != 0 && ValueNeeded(block, vs[j], name);
          rename = read || value;
        }
        if (!rename) continue;
        std::string fresh = Rename(block, name, desc, vs[j]);
        if ((outer || fed_value) && j == last) back.push_back(MakeAssign(fresh, name, *block.Op(vs[j].writer)));
      }
      if (resolved != 0 && v0_read) {
        const int reader_idx = vs[0].readers.empty() ? -1 : vs[0].readers.front();
        const OpDesc& reader = reader_idx < 0 ? *vs[0].copies.front() : *block.Op(static_cast<size_t>(reader_idx));
        const OpDesc& writer = *block.Op(vs[1].writer);
        // A target's gradient is its seed: the seed would be the gradient of
        // its last value and of the value it was fed with at once.
        NABLA_ENFORCE(!fed_value || targets_.count(name) == 0, kInvalidArgument, "append backward: target '", name,
                      "' is read by op '", reader.Type(), "' (op #", reader_idx, Where(reader),
                      ") and then overwritten by op '", writer.Type(), "' (op #", vs[1].writer, Where(writer),
                      "), so its seed '", GradVarName(name),
                      "' would be the gradient of both values; expected the target written once");
        if (fed_value || ValueNeeded(block, vs[0], name)) {
          std::string fresh = Rename(block, name, desc, vs[0]);
          front.push_back(MakeAssign(name, fresh, reader));
        }
      }
    }
    // Back to front, so the recorded positions stay right; copies of the
    // starting values go before everything.
    std::stable_sort(copies.begin(), copies.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = copies.size(); k-- > 0;) block.InsertOp(copies[k].first, std::move(copies[k].second));
    for (size_t k = 0; k < front.size(); ++k) block.InsertOp(k, std::move(front[k]));
    for (auto& op : back) block.AppendOp(std::move(op));

    for (size_t i = 0; i < block.OpSize(); ++i) {
      int sub = SubBlockOf(*block.Op(i), registry_);
      if (sub >= 0 && sub != block.Idx() && static_cast<size_t>(sub) < program_.Size()) {
        const OpDesc& op = *block.Op(i);
        std::vector<std::string> ins = op.InputArgumentNames();
        NameSet both;
        for (const auto& a : op.OutputArgumentNames())
          if (std::find(ins.begin(), ins.end(), a) != ins.end()) both.insert(a);
        Run(*program_.Block(static_cast<size_t>(sub)), &both);
      }
    }
  }

 private:
  // Dense vars only: tensor arrays and step scopes are written in place by
  // design (write_to_array, while) and have their own gradient rules.
  bool Tracked(const BlockDesc& block, const std::string& name) const {
    if (name == kEmptyVarName) return false;
    const VarDesc* v = block.FindVarRecursive(name);
    return v == nullptr || v->Type() == VarType::kDense;
  }

  bool WantsGrad(const VarDesc* desc, const std::string& name) const {
    if (no_grad_->count(name) != 0) return false;
    if (desc == nullptr) return true;
    return !desc->StopGradient() && (!desc->HasDType() || IsFloating(desc->GetDType()));
  }

  // What the grad ops of an op touch: the forward vars they read, and the
  // forward vars whose gradient they write.
  struct GradUse {
    NameSet reads;
    NameSet grads;
  };
  const GradUse& Use(const OpDesc& op) {
    auto [it, fresh] = grad_use_.try_emplace(&op);
    if (!fresh) return it->second;
    GradUse& use = it->second;
    const OpInfo* info = registry_.Find(op.Type());
    if (info == nullptr || !info->HasGradient()) return use;
    auto everything = [&] {
      for (const auto& a : op.InputArgumentNames()) use.reads.insert(a), use.grads.insert(a);
      for (const auto& a : op.OutputArgumentNames()) use.reads.insert(a);
    };
    // An op that owns a block may read anything it names.
    if (SubBlockOf(op, registry_) >= 0) {
      everything();
      return use;
    }
    try {
      for (const auto& g : info->grad_maker(op, {}, nullptr, {})) {
        if (g == nullptr) continue;
        for (const auto& a : g->InputArgumentNames())
          if (a != kEmptyVarName && a.find(kGradSuffix) == std::string::npos) use.reads.insert(a);
        for (const auto& a : g->OutputArgumentNames())
          if (a != kEmptyVarName && a.find(kGradSuffix) != std::string::npos) use.grads.insert(StripGradSuffix(a));
      }
    } catch (const std::exception&) {
      // A maker that refuses to run out of context (no grad block, no
      // no-grad set): assume its grad ops read and write everything.
      everything();
    }
    return use;
  }

  // Whether a grad op reads the value `v` holds: one of its readers', or
  // its writer's (an activation's grad reads Out).
  bool ValueNeeded(const BlockDesc& block, const Version& v, const std::string& name) {
    for (int r : v.readers)
      if (Use(*block.Op(static_cast<size_t>(r))).reads.count(name)) return true;
    for (const OpDesc* c : v.copies)
      if (Use(*c).reads.count(name)) return true;
    return v.writer >= 0 && Use(*block.Op(static_cast<size_t>(v.writer))).reads.count(name) != 0;
  }

  // Whether a reader of `v` has a grad op that reads it or writes its
  // gradient (less_than, say, has neither).
  bool RelevantReader(const BlockDesc& block, const Version& v, const std::string& name) {
    for (int r : v.readers) {
      const GradUse& use = Use(*block.Op(static_cast<size_t>(r)));
      if (use.reads.count(name) || use.grads.count(name)) return true;
    }
    for (const OpDesc* c : v.copies)
      if (Use(*c).grads.count(name)) return true;
    return false;
  }

  // A version's own name, declared in `block` like `name`.
  std::string Fresh(BlockDesc& block, const std::string& name, const VarDesc* desc, int first) {
    std::string fresh;
    for (int n = first;; ++n) {
      fresh = name + kVersionInfix + std::to_string(n);
      if (!block.HasVarRecursive(fresh) && used_.insert(fresh).second) break;
    }
    VarDesc* var = block.Var(fresh);
    if (desc != nullptr) {
      var->SetType(desc->Type());
      var->SetDType(desc->GetDType());
      var->MarkDTypeKnown(desc->HasDType());
      var->SetShape(desc->GetShape());
      var->SetStopGradient(desc->StopGradient());
    }
    if (no_grad_->count(name)) no_grad_->insert(fresh);
    return fresh;
  }

  std::string Rename(BlockDesc& block, const std::string& name, const VarDesc* desc, const Version& v) {
    std::string fresh = Fresh(block, name, desc, v.writer < 0 ? 0 : 1);
    for (const ArgRef& ref : v.refs) {
      (*ref.args)[ref.i] = fresh;
      if (ref.sub_block >= 0) RenameInTree(ref.sub_block, name, fresh);
    }
    return fresh;
  }

  // An op that owns a block (or declares UpdatesInPlace) writes `v` in
  // place at op `at`: the value stays one version for gradients (the op's
  // grad op hands them on in place), but the grad ops of the ops that wrote
  // or read it before `at` run later and would see the new value. If one of
  // them reads the value, they get a copy: the writer writes it and an
  // `assign` right after puts it under the name, or (a value the block
  // starts with) the readers read a copy made before the first of them.
  // Gradients flow through the assign back to the copy.
  void SplitBeforeInPlace(BlockDesc& block, const std::string& name, Version& v, int at,
                          std::vector<std::pair<size_t, std::unique_ptr<OpDesc>>>* copies) {
    auto is_in_place = [&](int r) { return std::find(v.in_place.begin(), v.in_place.end(), r) != v.in_place.end(); };
    std::vector<int> before;
    bool needed = false;
    for (int r : v.readers)
      if (r < at && !is_in_place(r)) {
        before.push_back(r);
        needed |= Use(*block.Op(static_cast<size_t>(r))).reads.count(name) != 0;
      }
    const bool writer_reads =
        v.writer >= 0 && !v.writer_split && Use(*block.Op(static_cast<size_t>(v.writer))).reads.count(name) != 0;
    v.in_place.push_back(at);
    if (!needed && !writer_reads) return;
    auto moved = [&](const ArgRef& ref) {
      if (ref.op < 0) return false;
      if (ref.input) return std::find(before.begin(), before.end(), ref.op) != before.end();
      return writer_reads && ref.op == v.writer;
    };
    std::string copy = Fresh(block, name, block.FindVarRecursive(name), 1);
    std::vector<ArgRef> kept;
    for (const ArgRef& ref : v.refs) {
      if (moved(ref)) {
        (*ref.args)[ref.i] = copy;
        if (ref.sub_block >= 0) RenameInTree(ref.sub_block, name, copy);
      } else {
        kept.push_back(ref);
      }
    }
    v.refs = std::move(kept);
    v.readers.erase(std::remove_if(v.readers.begin(), v.readers.end(),
                                   [&](int r) { return std::find(before.begin(), before.end(), r) != before.end(); }),
                    v.readers.end());
    if (writer_reads) {
      v.writer_split = true;
      std::unique_ptr<OpDesc> op = MakeAssign(copy, name, *block.Op(static_cast<size_t>(v.writer)));
      v.refs.push_back(ArgRef{&op->MutableOutputs().at("Out"), 0, -1, -1, false});
      copies->emplace_back(static_cast<size_t>(v.writer + 1), std::move(op));
    } else {
      std::unique_ptr<OpDesc> op = MakeAssign(name, copy, *block.Op(static_cast<size_t>(before.front())));
      v.refs.push_back(ArgRef{&op->MutableInputs().at("X"), 0, -1, -1, true});
      v.copies.push_back(op.get());
      copies->emplace_back(static_cast<size_t>(before.front()), std::move(op));
    }
  }

  // Renames an outer var in a block an op owns and in the blocks under it,
  // down to where a block declares a var of that name itself.
  void RenameInTree(int idx, const std::string& from, const std::string& to) {
    if (idx < 0 || static_cast<size_t>(idx) >= program_.Size()) return;
    BlockDesc& block = *program_.Block(static_cast<size_t>(idx));
    if (block.HasVar(from)) return;
    for (size_t i = 0; i < block.OpSize(); ++i) {
      OpDesc& op = *block.Op(i);
      op.RenameInput(from, to);
      op.RenameOutput(from, to);
      int sub = SubBlockOf(op, registry_);
      if (sub >= 0 && sub != idx) RenameInTree(sub, from, to);
    }
  }

  std::unique_ptr<OpDesc> MakeAssign(const std::string& from, const std::string& to, const OpDesc& at) {
    NABLA_ENFORCE(registry_.Find(kAssignOp) != nullptr, kNotFound, "append backward: var '", to,
                  "' is overwritten and its versions need op '", kAssignOp,
                  "' but no loaded plugin registers it; load the standard math_ops plugin");
    auto op = std::make_unique<OpDesc>(kAssignOp, VarNameMap{{"X", {from}}}, VarNameMap{{"Out", {to}}}, AttributeMap{});
    op->SetPos(at.Pos());
    FillDefaultAttrs(*op, registry_, &program_);
    return op;
  }

  std::string Where(const OpDesc& op) const {
    std::string w = program_.Where(op.Pos());
    return w.empty() ? w : " at " + w;
  }

  ProgramDesc& program_;
  const OpRegistry& registry_;
  NameSet* no_grad_;  // non-owning
  NameSet targets_;
  std::unordered_map<const OpDesc*, GradUse> grad_use_;
  NameSet used_;
};

}  // namespace

int SubBlockOf(const OpDesc& op, const OpRegistry& registry) {
  // The op's own small attribute map first: most ops have no block, and
  // this spares them a registry lookup.
  auto it = op.Attrs().find(kSubBlockAttr);
  if (it == op.Attrs().end()) return -1;
  const BlockRef* ref = std::get_if<BlockRef>(&it->second);
  if (ref == nullptr) return -1;
  const OpInfo* info = registry.Find(op.Type());
  return info != nullptr && info->traits.has_sub_block ? ref->idx : -1;
}

void RenameOverwrittenVars(ProgramDesc& program, BlockDesc& root, const OpRegistry& registry,
                           const std::vector<std::string>& targets, NameSet* no_grad) {
  OverwritePass(program, registry, no_grad, NameSet(targets.begin(), targets.end())).Run(root, nullptr);
}

}  // namespace nabla
