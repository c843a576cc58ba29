// The backward builder: seed 002's append_backward (_append_backward_ops_,
// _addup_repetitive_outputs_, _remove_no_grad_branch_, _append_backward_vars_)
// with today's Paddle refinements: ops are pruned to the paths that carry a
// gradient to the targets, no-grad branches are removed before contributions
// are renamed (so a dropped op never leaves a half-fed `sum`), and gradient
// vars take the dtype and shape of their forward var before inference runs.
//
// The builder knows no op but three, whose types are naming conventions of
// seed 002 (docs/architecture.md, "The op names the core uses"): fill_constant
// seeds, fill_zeros_like zero-fills, sum accumulates. What it
// must know about any other op comes from the registry: the GradOpDescMaker
// and the has_sub_block trait.
//
// Every pass is linear in the number of ops and arguments: readers and writers
// are indexed in hash maps while scanning, renames go through recorded slots
// instead of searching the op list, and inserted ops are merged into a new
// vector rather than inserted one by one.
#include "nabla/backward.h"

#include <algorithm>
#include <cstring>

#include "nabla/op_registry.h"
#include "nabla/opcheck.h"
#include "overwrite_pass.h"
#include "plugin_call.h"

namespace nabla {
namespace {

// Seed 002's conventions (docs/architecture.md).
constexpr const char* kFillConstantOp = "fill_constant";
constexpr const char* kFillZerosLikeOp = "fill_zeros_like";
constexpr const char* kSumOp = "sum";
// Seed 002: an op that owns a block names it in this attribute.
constexpr const char* kSubBlockAttr = "sub_block";

using NameSet = std::unordered_set<std::string>;
using OpList = std::vector<std::unique_ptr<OpDesc>>;

bool Contains(const NameSet& set, const std::string& name) { return set.count(name) != 0; }

// A gradient argument in the seed's sense: any name carrying @GRAD
// (x@GRAD, x@GRAD@RENAME@1, x@GRAD@GRAD).
bool MentionsGrad(const std::string& name) { return name.find(kGradSuffix) != std::string::npos; }

// x@GRAD -> x, x@GRAD@RENAME@2 -> x, x@GRAD@GRAD -> x@GRAD: the one rule
// (nabla/types.h).
std::string ForwardVarOf(const std::string& grad) { return StripGradSuffix(grad); }

// "prog.yaml:7:5: " when the op's position in `program` is known, else "".
std::string WherePrefix(const ProgramDesc* program, const OpDesc& op) {
  std::string where = program ? program->Where(op.Pos()) : std::string();
  return where.empty() ? where : where + ": ";
}

// `program` (may be null) only locates the forward op in messages.
std::vector<std::unique_ptr<OpDesc>> MakeGradOpsWith(const OpRegistry& registry, const OpDesc& op,
                                                     const NameSet& no_grad_set,
                                                     std::unordered_map<std::string, std::string>* grad_to_var,
                                                     const std::vector<BlockDesc*>& grad_blocks,
                                                     const ProgramDesc* program = nullptr) {
  const OpInfo& info = registry.Get(op.Type());
  NABLA_ENFORCE(info.HasGradMaker(), kNotFound, WherePrefix(program, op), "op '", op.Type(),
                "' needs a gradient but has no GradOpDescMaker: expected its registration to call GradMaker<...>() "
                "(or GradMaker<EmptyGradOpDescMaker>() for an op without gradient), but received none; registered by ",
                info.origin.ToString());
  OpList grad_ops = internal::CallPlugin(
      info.origin, "its grad maker", [&] { return info.grad_maker(op, no_grad_set, grad_to_var, grad_blocks); },
      StrCat(WherePrefix(program, op), "op '", op.Type(), "': "));
  if (program == nullptr && !grad_blocks.empty()) program = grad_blocks.front()->Program();
  for (auto& g : grad_ops) {
    NABLA_ENFORCE(g != nullptr, kInvalidArgument, "the GradOpDescMaker of op '", op.Type(),
                  "' returned a null op; registered by ", info.origin.ToString());
    // Errors about a grad op point at the forward op the user wrote.
    if (g->Pos().line == 0) g->SetPos(op.Pos());
    // A grad op that owns a block runs the grad block built for it. Makers
    // that copy the forward attributes still name the forward block here.
    if (!grad_blocks.empty()) {
      const OpInfo* g_info = registry.Find(g->Type());
      if (g_info != nullptr && g_info->traits.has_sub_block) {
        int current = -1;
        auto it = g->Attrs().find(kSubBlockAttr);
        if (it != g->Attrs().end())
          if (const BlockRef* ref = std::get_if<BlockRef>(&it->second)) current = ref->idx;
        bool names_grad_block = false;
        for (BlockDesc* b : grad_blocks) names_grad_block |= (b->Idx() == current);
        if (!names_grad_block) g->SetAttr(kSubBlockAttr, BlockRef{grad_blocks.front()->Idx()});
      }
    }
    // A maker's mistake (a slot its grad op lacks) is reported here, naming
    // the maker, not by whoever runs the program it ends up in.
    const std::string where = StrCat(WherePrefix(program, op), "op '", op.Type(), "': its grad maker (",
                                     info.origin.ToString(), ") emitted grad op '", g->Type(), "'");
    const OpInfo* g_info = registry.Find(g->Type());
    NABLA_ENFORCE(g_info != nullptr, kNotFound, where, ", which no loaded plugin registers");
    try {
      FillDefaultAttrs(*g, registry, program);
    } catch (const Error& e) {
      ThrowError(e.kind(), StrCat(where, ": ", e.what()));
    }
    VerifyOpSchema(*g, g_info->schema, where);
  }
  return grad_ops;
}

class BackwardBuilder {
 public:
  BackwardBuilder(ProgramDesc& program, const OpRegistry& registry) : program_(program), registry_(registry) {}

  // user set ∪ stop_gradient vars ∪ integer/bool vars, over all blocks. A var
  // in `keep` stays out unless the user named it (CalcGradient's inputs).
  void InitNoGradSet(const NameSet& user, const NameSet& keep) {
    no_grad_ = user;
    for (size_t b = 0; b < program_.Size(); ++b)
      for (const auto& var : program_.Block(b)->AllVars()) {
        bool no_grad = var->StopGradient() || (var->HasDType() && !IsFloating(var->GetDType()));
        if (no_grad && !(Contains(keep, var->Name()) && IsFloating(var->GetDType()))) no_grad_.insert(var->Name());
      }
  }
  const NameSet& NoGrad() const { return no_grad_; }

  // The ops of `block` on a path from a var that wants a gradient to one of
  // `targets`, in forward order. With `sources`, only paths that start at a
  // source count, and the inputs of those ops that carry no gradient from a
  // source join the no-grad set, so makers emit @EMPTY@ for them.
  std::vector<const OpDesc*> FindOpPath(const BlockDesc& block, const std::vector<std::string>& targets,
                                        const NameSet* sources) {
    const auto& ops = block.AllOps();
    std::vector<char> on_path(ops.size(), 0);
    NameSet flow;
    if (sources != nullptr)
      for (const auto& s : *sources)
        if (!Contains(no_grad_, s)) flow.insert(s);
    auto carries = [&](const std::string& n) {
      return n != kEmptyVarName && !Contains(no_grad_, n) && (sources == nullptr || Contains(flow, n));
    };
    // Without sources (AppendBackward), Paddle's _find_no_grad_vars: a var
    // that only an op without a gradient-carrying input writes has no
    // gradient path either, so it joins the no-grad set and the makers of
    // its readers emit @EMPTY@ for it instead of a gradient nobody reads.
    // That is what keeps a no-grad var's cast (the bf16 pass's x@BF16@n)
    // from costing a GEMM, and its reader's other gradient from being left
    // in bfloat16 (FoldBf16Casts folds all outputs or none). Persistable
    // vars, targets and vars with other writers anywhere are left alone.
    std::unordered_map<std::string, size_t> writers;
    if (sources == nullptr)
      for (size_t b = 0; b < program_.Size(); ++b)
        for (const auto& op : program_.Block(b)->AllOps())
          for (const auto& a : op->OutputArgumentNames()) ++writers[a];
    const NameSet target_set(targets.begin(), targets.end());
    for (size_t i = 0; i < ops.size(); ++i) {
      for (const auto& [slot, args] : ops[i]->Inputs())
        for (const auto& a : args) on_path[i] |= carries(a);
      if (on_path[i] && sources != nullptr)
        for (const auto& [slot, args] : ops[i]->Outputs())
          for (const auto& a : args)
            if (a != kEmptyVarName && !Contains(no_grad_, a)) flow.insert(a);
      if (!on_path[i] && sources == nullptr && SubBlockOf(*ops[i], registry_) < 0) {
        const OpInfo* info = registry_.Find(ops[i]->Type());
        if (info == nullptr || info->traits.control_flow || info->traits.has_sub_block) continue;
        for (const auto& a : ops[i]->OutputArgumentNames()) {
          if (a == kEmptyVarName || Contains(target_set, a) || writers[a] != 1) continue;
          const VarDesc* v = block.FindVarRecursive(a);
          if (v != nullptr && !v->Persistable()) no_grad_.insert(a);
        }
      }
    }
    NameSet needed(targets.begin(), targets.end());
    needed.reserve(ops.size());
    for (size_t i = ops.size(); i-- > 0;) {
      if (!on_path[i]) continue;
      bool reaches = false;
      for (const auto& [slot, args] : ops[i]->Outputs())
        for (const auto& a : args) reaches |= Contains(needed, a);
      if (!reaches) {
        on_path[i] = 0;
        continue;
      }
      for (const auto& [slot, args] : ops[i]->Inputs())
        for (const auto& a : args)
          if (carries(a)) needed.insert(a);
    }
    std::vector<const OpDesc*> path;
    for (size_t i = 0; i < ops.size(); ++i)
      if (on_path[i]) path.push_back(ops[i].get());
    if (sources != nullptr)
      for (const OpDesc* op : path)
        for (const auto& [slot, args] : op->Inputs())
          for (const auto& a : args)
            if (a != kEmptyVarName && !Contains(flow, a)) no_grad_.insert(a);
    return path;
  }

  // _append_backward_ops_: grad ops of `ops` (forward order) in reverse
  // order; an op that owns a block gets that block's backward built first,
  // into a new block whose parent is the forward sub-block.
  OpList CreateGradOps(const std::vector<const OpDesc*>& ops) {
    OpList grad_ops;
    grad_ops.reserve(ops.size());
    for (size_t k = ops.size(); k-- > 0;) {
      const OpDesc& op = *ops[k];
      std::vector<BlockDesc*> grad_blocks;
      int sub = SubBlockOf(op, registry_);
      if (sub >= 0) {
        NABLA_ENFORCE(static_cast<size_t>(sub) < program_.Size(), kOutOfRange, WherePrefix(&program_, op), "op '",
                      op.Type(), "' names ", kSubBlockAttr, " ", sub, " but the program has ", program_.Size(),
                      " blocks");
        BlockDesc* grad_block = program_.AppendBlock(sub);
        BuildSubBlock(*program_.Block(static_cast<size_t>(sub)), *grad_block);
        grad_blocks.push_back(grad_block);
      }
      // The forward var of a gradient is read off its name (ForwardVarOf), so
      // no grad-to-var map is kept: one hash insert per gradient saved.
      OpList made = MakeGradOpsWith(registry_, op, no_grad_, nullptr, grad_blocks, &program_);
      for (auto& g : made) grad_ops.push_back(std::move(g));
    }
    return grad_ops;
  }

  // _remove_no_grad_branch_. Walks the grad ops in order (writers of a
  // gradient come before its readers) and drops an op whose outputs are all
  // no-grad or @EMPTY@, or whose gradient inputs are all zero; a dropped op
  // produces nothing. A gradient still read but produced by nothing is
  // zero-filled right before its first reader. `produced` starts with the
  // seeds. In a grad sub-block, gradients of the block's outputs come from
  // outside (`check_produced` false): only no-grad ones are zero there, and
  // those of vars local to `fwd_block` (no op outside reads them; one no op
  // of the block reads is dead).
  OpList RemoveNoGradBranch(OpList ops, NameSet produced, bool check_produced, const NameSet& seed_names,
                            const BlockDesc* fwd_block = nullptr) {
    auto is_grad_input = [&](const std::string& n) { return MentionsGrad(n) || Contains(seed_names, n); };
    auto is_zero = [&](const std::string& n) {
      return !Contains(produced, n) &&
             (check_produced || Contains(no_grad_, n) || (fwd_block != nullptr && fwd_block->HasVar(ForwardVarOf(n))));
    };
    produced.reserve(produced.size() + ops.size());
    OpList kept;
    kept.reserve(ops.size());
    // Pointers into the op's own argument lists: no copies per argument.
    std::vector<const std::string*> outs, grad_ins;
    for (auto& op : ops) {
      outs.clear();
      grad_ins.clear();
      for (const auto& [slot, args] : op->Outputs())
        for (const auto& a : args)
          if (a != kEmptyVarName) outs.push_back(&a);
      bool drop = std::all_of(outs.begin(), outs.end(), [&](const std::string* o) { return Contains(no_grad_, *o); });
      if (!drop) {
        for (const auto& [slot, args] : op->Inputs())
          for (const auto& a : args)
            if (a != kEmptyVarName && is_grad_input(a)) grad_ins.push_back(&a);
        drop = !grad_ins.empty() &&
               std::all_of(grad_ins.begin(), grad_ins.end(), [&](const std::string* g) { return is_zero(*g); });
      }
      if (drop) continue;
      for (const std::string* g : grad_ins) {
        if (!is_zero(*g)) continue;
        kept.push_back(MakeConventionOp(kFillZerosLikeOp, {{"X", {ForwardVarOf(*g)}}}, {{"Out", {*g}}}, {}));
        produced.insert(*g);
      }
      for (const std::string* o : outs) produced.insert(*o);
      kept.push_back(std::move(op));
    }
    return kept;
  }

  // _addup_repetitive_outputs_: a gradient written by several ops gets one
  // x@GRAD@RENAME@k per write and a `sum` into x@GRAD right before its next
  // reader (or at the end). In-place writes (the name is also an input) and
  // @EMPTY@ are left alone.
  OpList AddupRepetitiveOutputs(OpList ops) {
    struct ArgRef {
      std::vector<std::string>* args;  // non-owning: a slot vector of an op we hold
      size_t i;
      int next;  // previous ref of the same var in `refs`, or -1
    };
    // Per gradient: nothing allocated unless it really has two contributions.
    struct Accum {
      bool single = false;             // one contribution, under the plain name
      int last_ref = -1;               // its write and the reads since, chained in `refs`
      std::vector<std::string> parts;  // two or more renamed contributions
      int rename_count = 0;
    };
    std::vector<ArgRef> refs;  // one pool for every var's chain
    std::unordered_map<std::string, Accum> accums;
    accums.reserve(ops.size());
    std::vector<const std::string*> order;  // keys of `accums` (stable), for deterministic final sums
    std::vector<std::pair<size_t, std::unique_ptr<OpDesc>>> sums;  // (insert before index, op)

    auto add_ref = [&](Accum& acc, std::vector<std::string>* args, size_t i) {
      refs.push_back(ArgRef{args, i, acc.last_ref});
      acc.last_ref = static_cast<int>(refs.size() - 1);
    };
    // The sum's output is the var's single contribution from here on.
    auto make_sum = [&](const std::string& var, Accum& acc, size_t before) {
      auto sum = MakeConventionOp(kSumOp, {{"X", std::move(acc.parts)}}, {{"Out", {var}}}, {});
      acc.parts.clear();
      acc.single = true;
      acc.last_ref = -1;
      add_ref(acc, &sum->MutableOutputs().at("Out"), 0);
      sums.emplace_back(before, std::move(sum));
    };
    // Plain concatenation: StrCat's ostringstream cost more than the rest
    // of this pass together.
    auto rename = [](const std::string& var, Accum& acc) {
      return var + kRenameInfix + std::to_string(acc.rename_count++);
    };

    for (size_t idx = 0; idx < ops.size(); ++idx) {
      OpDesc& op = *ops[idx];
      for (auto& [slot, args] : op.MutableInputs())
        for (size_t i = 0; i < args.size(); ++i) {
          if (!MentionsGrad(args[i])) continue;
          auto it = accums.find(args[i]);
          if (it == accums.end()) continue;
          Accum& acc = it->second;
          if (!acc.parts.empty())
            make_sum(args[i], acc, idx);
          else if (acc.single)
            add_ref(acc, &args, i);
        }
      for (auto& [slot, args] : op.MutableOutputs())
        for (size_t i = 0; i < args.size(); ++i) {
          const std::string& var = args[i];
          if (var == kEmptyVarName || !MentionsGrad(var)) continue;
          bool in_place = false;
          for (const auto& [in_slot, in_args] : op.Inputs())
            for (const auto& a : in_args) in_place |= (a == var);
          auto [it, fresh] = accums.try_emplace(var);
          Accum& acc = it->second;
          if (fresh) order.push_back(&it->first);
          if (in_place) {
            // An in-place write (a loop's grad op handing a carried gradient
            // on) replaces the whole gradient so far: it becomes the single
            // contribution, so a later write renames this output, not the
            // input it read.
            acc.parts.clear();
            acc.single = true;
            acc.last_ref = -1;
            add_ref(acc, &args, i);
            continue;
          }
          if (!acc.single && acc.parts.empty()) {
            acc.single = true;
            add_ref(acc, &args, i);
            continue;
          }
          if (acc.single) {
            // The earlier write, and what read it since, becomes contribution 0.
            std::string first = rename(it->first, acc);
            for (int r = acc.last_ref; r >= 0; r = refs[static_cast<size_t>(r)].next)
              (*refs[static_cast<size_t>(r)].args)[refs[static_cast<size_t>(r)].i] = first;
            acc.single = false;
            acc.last_ref = -1;
            acc.parts.push_back(std::move(first));
          }
          std::string name = rename(it->first, acc);
          args[i] = name;  // `var` refers to args[i]: not used past this point
          acc.parts.push_back(std::move(name));
        }
    }
    for (const std::string* var : order) {
      Accum& acc = accums.at(*var);
      if (!acc.parts.empty()) make_sum(*var, acc, ops.size());
    }
    if (sums.empty()) return ops;
    OpList merged;
    merged.reserve(ops.size() + sums.size());
    size_t s = 0;
    for (size_t idx = 0; idx <= ops.size(); ++idx) {
      for (; s < sums.size() && sums[s].first == idx; ++s) merged.push_back(std::move(sums[s].second));
      if (idx < ops.size()) merged.push_back(std::move(ops[idx]));
    }
    return merged;
  }

  // The backward of a forward sub-block, into `grad_block`. Nothing outside
  // says which of its ops reach a target, so every op reading a var that
  // wants a gradient gets its grad ops.
  void BuildSubBlock(const BlockDesc& fwd_block, BlockDesc& grad_block) {
    std::vector<const OpDesc*> ops;
    for (const auto& op : fwd_block.AllOps()) {
      bool wants = false;
      for (const auto& [slot, args] : op->Inputs())
        for (const auto& a : args) wants |= (a != kEmptyVarName && !Contains(no_grad_, a));
      if (wants) ops.push_back(op.get());
    }
    OpList grad_ops = AddupRepetitiveOutputs(RemoveNoGradBranch(CreateGradOps(ops), {}, false, {}, &fwd_block));
    for (auto& g : grad_ops) grad_block.AppendOp(std::move(g));
  }

  // _append_backward_vars_: creates the outputs of block.ops[start:] that do
  // not exist yet (gradients with their forward var's type, dtype and
  // shape), recursing into the blocks grad ops own, then runs var-type and
  // shape inference on each op.
  void CreateVars(BlockDesc& block, size_t start) {
    for (size_t i = start; i < block.OpSize(); ++i) {
      const OpDesc& op = *block.Op(i);
      for (const auto& [slot, args] : op.Outputs())
        for (const auto& a : args) {
          if (a == kEmptyVarName || block.HasVarRecursive(a)) continue;
          VarDesc* var = block.Var(a);
          if (!MentionsGrad(a)) continue;
          if (const VarDesc* fwd = block.FindVarRecursive(ForwardVarOf(a))) {
            var->SetType(fwd->Type());
            var->SetDType(fwd->GetDType());
            var->MarkDTypeKnown(fwd->HasDType());
            var->SetShape(fwd->GetShape());
          }
        }
      int sub = SubBlockOf(op, registry_);
      if (sub >= 0 && static_cast<size_t>(sub) < program_.Size() && sub != block.Idx()) {
        BlockDesc& grad_block = *program_.Block(static_cast<size_t>(sub));
        // A grad block nested in another one reads gradients its op gets
        // from the enclosing grad block (the op copies them into its scope
        // when it runs), but its parent is a forward block: declare them
        // there too, or nothing visible from it names them.
        for (const auto& inner : grad_block.AllOps())
          for (const auto& a : inner->InputArgumentNames()) {
            if (a == kEmptyVarName || !MentionsGrad(a) || grad_block.HasVarRecursive(a)) continue;
            if (const VarDesc* outer = block.FindVarRecursive(a)) {
              VarDesc* var = grad_block.Var(a);
              var->SetType(outer->Type());
              var->SetDType(outer->GetDType());
              var->MarkDTypeKnown(outer->HasDType());
              var->SetShape(outer->GetShape());
            }
          }
        CreateVars(grad_block, 0);
      }
      InferOpAtBuildTime(op, block, registry_);
    }
  }

  std::unique_ptr<OpDesc> MakeConventionOp(const char* type, VarNameMap inputs, VarNameMap outputs,
                                           AttributeMap attrs) {
    NABLA_ENFORCE(registry_.Find(type) != nullptr, kNotFound, "the backward builder needs op '", type,
                  "' but no loaded plugin registers it; load the standard math_ops plugin");
    auto op = std::make_unique<OpDesc>(type, std::move(inputs), std::move(outputs), std::move(attrs));
    FillDefaultAttrs(*op, registry_, &program_);
    return op;
  }

 private:
  ProgramDesc& program_;
  const OpRegistry& registry_;
  NameSet no_grad_;
};

// The block that declares `name`, searching blocks in order.
BlockDesc* BlockDeclaring(const ProgramDesc& program, const std::string& name) {
  for (size_t b = 0; b < program.Size(); ++b)
    if (program.Block(b)->HasVar(name)) return program.Block(b);
  return nullptr;
}

std::unique_ptr<OpDesc> MakeSeed(BackwardBuilder& builder, const VarDesc& target) {
  std::vector<int> shape(target.GetShape().begin(), target.GetShape().end());
  return builder.MakeConventionOp(
      kFillConstantOp, {}, {{"Out", {GradVarName(target.Name())}}},
      {{"shape", shape}, {"value", 1.0f}, {"dtype", std::string(DTypeName(target.GetDType()))}});
}

// Builds the backward of `targets` in `block`: seeds (fill_constant ops, or
// the vars in `seed_names` standing in for target@GRAD), pruned grad ops,
// zero-fills and sums appended after the forward ops, then the new vars.
// Returns which of the `wanted` gradients the appended ops produce.
NameSet BuildRootBackward(BackwardBuilder& builder, BlockDesc& block, const std::vector<std::string>& targets,
                          const std::vector<std::string>& seed_names, const NameSet* sources, const NameSet& wanted) {
  std::vector<const OpDesc*> path = builder.FindOpPath(block, targets, sources);
  OpList seeds;
  NameSet produced;
  NameSet seed_set;
  std::unordered_map<std::string, std::string> seed_rename;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (seed_names.empty()) {
      seeds.push_back(MakeSeed(builder, *block.FindVarRecursive(targets[i])));
      produced.insert(GradVarName(targets[i]));
    } else {
      seed_rename.emplace(GradVarName(targets[i]), seed_names[i]);
      seed_set.insert(seed_names[i]);
      produced.insert(seed_names[i]);
    }
  }
  OpList grad_ops = builder.CreateGradOps(path);
  if (!seed_rename.empty())
    for (auto& op : grad_ops)
      for (auto& [slot, args] : op->MutableInputs())
        for (auto& a : args) {
          auto it = seed_rename.find(a);
          if (it != seed_rename.end()) a = it->second;
        }
  grad_ops = builder.RemoveNoGradBranch(std::move(grad_ops), produced, true, seed_set);
  OpList all = std::move(seeds);
  all.reserve(all.size() + grad_ops.size());
  for (auto& g : grad_ops) all.push_back(std::move(g));
  all = builder.AddupRepetitiveOutputs(std::move(all));

  size_t start = block.OpSize();
  NameSet written;
  for (auto& op : all) {
    for (const auto& [slot, args] : op->Outputs())
      for (const auto& a : args)
        if (Contains(wanted, a)) written.insert(a);
    block.AppendOp(std::move(op));
  }
  builder.CreateVars(block, start);
  return written;
}

}  // namespace

std::vector<std::unique_ptr<OpDesc>> MakeGradOps(const OpDesc& op, const std::unordered_set<std::string>& no_grad_set,
                                                 std::unordered_map<std::string, std::string>* grad_to_var,
                                                 const std::vector<BlockDesc*>& grad_blocks) {
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  return MakeGradOpsWith(*registry, op, no_grad_set, grad_to_var, grad_blocks);
}

ParamGrads AppendBackward(ProgramDesc& program, const std::string& loss, const std::vector<std::string>& parameter_list,
                          const std::unordered_set<std::string>& no_grad_set) {
  BlockDesc* block = BlockDeclaring(program, loss);
  NABLA_ENFORCE(block != nullptr, kNotFound, "append backward: the loss '", loss,
                "' is not a variable of the program; expected the name of a declared or produced var");
  const VarDesc& loss_var = *block->FindVar(loss);
  NABLA_ENFORCE(NumElements(loss_var.GetShape()) == 1, kInvalidArgument, "append backward: the loss '", loss,
                "' must hold exactly one element, but received shape ", ShapeToString(loss_var.GetShape()),
                "; reduce it to one element first",
                program.Where(loss_var.Pos()).empty() ? "" : " (declared at " + program.Where(loss_var.Pos()) + ")");
  NABLA_ENFORCE(IsFloating(loss_var.GetDType()), kInvalidArgument, "append backward: the loss '", loss,
                "' must be float32 or float64, but received ", DTypeName(loss_var.GetDType()));
  // A second pass would write every gradient twice under the same names.
  NABLA_ENFORCE(!program.Backward().has_value() && !block->HasVarRecursive(GradVarName(loss)), kPreconditionNotMet,
                "append backward: the program already has a backward part (for loss '",
                program.Backward() ? program.Backward()->loss : loss,
                "'); expected a forward-only program, but received one with gradient ops appended");

  std::vector<std::string> params = parameter_list;
  if (params.empty()) {
    for (const BlockDesc* b = block; b != nullptr; b = b->Parent())
      for (const auto& var : b->AllVars())
        if (var->Persistable() && IsFloating(var->GetDType()) && !var->StopGradient()) params.push_back(var->Name());
  } else {
    for (const auto& p : params)
      NABLA_ENFORCE(block->HasVarRecursive(p), kNotFound, "append backward: parameter '", p,
                    "' of the parameter list is not a variable visible from block ", block->Idx(),
                    " (the block of loss '", loss, "')");
  }

  // A misspelt no-grad name would otherwise train the var meant to stay fixed.
  for (const auto& n : no_grad_set)
    NABLA_ENFORCE(BlockDeclaring(program, n) != nullptr, kNotFound, "append backward: no-grad var '", n,
                  "' is not a variable of the program");
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  NameSet user_no_grad = no_grad_set;
  RenameOverwrittenVars(program, *block, *registry, {loss}, &user_no_grad);
  BackwardBuilder builder(program, *registry);
  builder.InitNoGradSet(user_no_grad, {});
  NameSet wanted;
  for (const auto& p : params) wanted.insert(GradVarName(p));
  NameSet written = BuildRootBackward(builder, *block, {loss}, {}, nullptr, wanted);

  ParamGrads pairs;
  for (const auto& p : params) {
    std::string g = GradVarName(p);
    if (Contains(written, g)) pairs.emplace_back(p, std::move(g));
  }
  program.SetBackward(BackwardInfo{loss, pairs});
  return pairs;
}

std::vector<std::string> CalcGradient(ProgramDesc& program, const std::vector<std::string>& targets,
                                      const std::vector<std::string>& inputs,
                                      const std::vector<std::string>& target_grads,
                                      const std::unordered_set<std::string>& no_grad_set) {
  NABLA_ENFORCE(!targets.empty(), kInvalidArgument, "calc gradient: expected at least one target, but received none");
  NABLA_ENFORCE(target_grads.empty() || target_grads.size() == targets.size(), kInvalidArgument,
                "calc gradient: expected one target gradient per target (", targets.size(), "), but received ",
                target_grads.size());
  BlockDesc* block = BlockDeclaring(program, targets.front());
  NABLA_ENFORCE(block != nullptr, kNotFound, "calc gradient: target '", targets.front(),
                "' is not a variable of the program");
  for (size_t i = 0; i < targets.size(); ++i) {
    const VarDesc* t = block->FindVarRecursive(targets[i]);
    NABLA_ENFORCE(t != nullptr, kNotFound, "calc gradient: target '", targets[i],
                  "' is not a variable visible from block ", block->Idx(), " (the block of target '", targets.front(),
                  "')");
    NABLA_ENFORCE(IsFloating(t->GetDType()), kInvalidArgument, "calc gradient: target '", targets[i],
                  "' must be float32 or float64, but received ", DTypeName(t->GetDType()));
    if (target_grads.empty()) {
      NABLA_ENFORCE(NumElements(t->GetShape()) >= 0, kInvalidArgument, "calc gradient: target '", targets[i],
                    "' has unknown dims ", ShapeToString(t->GetShape()),
                    " so its seed of ones cannot be built; expected known dims or a target gradient var");
    } else {
      const VarDesc* g = block->FindVarRecursive(target_grads[i]);
      NABLA_ENFORCE(g != nullptr, kNotFound, "calc gradient: target gradient '", target_grads[i], "' (for target '",
                    targets[i], "') is not a variable visible from block ", block->Idx());
      NABLA_ENFORCE(g->GetShape() == t->GetShape(), kInvalidArgument, "calc gradient: target gradient '",
                    target_grads[i], "' should have the shape of target '", targets[i], "' ",
                    ShapeToString(t->GetShape()), ", but received ", ShapeToString(g->GetShape()));
    }
  }
  for (const auto& in : inputs)
    NABLA_ENFORCE(block->HasVarRecursive(in), kNotFound, "calc gradient: input '", in,
                  "' is not a variable visible from block ", block->Idx());

  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  NameSet user_no_grad = no_grad_set;
  RenameOverwrittenVars(program, *block, *registry, targets, &user_no_grad);
  BackwardBuilder builder(program, *registry);
  NameSet sources(inputs.begin(), inputs.end());
  builder.InitNoGradSet(user_no_grad, sources);
  NameSet wanted;
  for (const auto& in : inputs) wanted.insert(GradVarName(in));
  NameSet written = BuildRootBackward(builder, *block, targets, target_grads, &sources, wanted);

  std::vector<std::string> grads;
  grads.reserve(inputs.size());
  for (const auto& in : inputs) {
    std::string g = GradVarName(in);
    grads.push_back(Contains(written, g) ? g : std::string());
  }
  return grads;
}

}  // namespace nabla
