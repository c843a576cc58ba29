#include "nabla/fusion.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

struct Candidate {
  const std::string* fused_type;  // non-owning: the registry outlives the pass
  const FusionPattern* pattern;   // non-owning
};

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Matches `pattern` starting at op `first` of `block`; fills the positions of
// the matched ops, or returns false.
bool Match(const BlockDesc& block, size_t first, const FusionPattern& pattern,
           const std::unordered_map<std::string, int>& readers, const std::unordered_map<std::string, int>& writers,
           const std::unordered_set<std::string>& keep, std::vector<size_t>* at) {
  at->assign(1, first);
  auto count = [](const std::unordered_map<std::string, int>& m, const std::string& name) {
    auto it = m.find(name);
    return it == m.end() ? 0 : it->second;
  };
  for (size_t k = 1; k < pattern.chain.size(); ++k) {
    const OpDesc& prev = *block.Op(at->back());
    std::vector<std::string> outs = prev.OutputArgumentNames();
    outs.erase(std::remove(outs.begin(), outs.end(), kEmptyVarName), outs.end());
    // The link is the one output of prev that the next op of the chain
    // reads; prev's other outputs (batch_norm's statistics, say) the fused
    // op writes as prev did.
    size_t next = block.OpSize();
    std::string link;
    for (size_t j = at->back() + 1; j < block.OpSize() && link.empty(); ++j) {
      const std::vector<std::string> ins = block.Op(j)->InputArgumentNames();
      for (const auto& out : outs) {
        if (!Contains(ins, out)) continue;
        if (!link.empty() || block.Op(j)->Type() != pattern.chain[k]) return false;
        link = out;
        next = j;
      }
    }
    if (link.empty()) return false;
    if (count(readers, link) != 1 || count(writers, link) != 1 || keep.count(link)) return false;
    const VarDesc* var = block.FindVarRecursive(link);
    if (var && var->Persistable()) return false;
    if (Contains(block.Op(next)->OutputArgumentNames(), link)) return false;
    at->push_back(next);
  }
  // The fused op runs where the last op of the chain ran: the ops in between
  // must not change what the chain reads, nor touch what it writes.
  std::unordered_set<std::string> reads, writes;
  for (size_t i : *at) {
    for (const auto& n : block.Op(i)->InputArgumentNames()) reads.insert(n);
    for (const auto& n : block.Op(i)->OutputArgumentNames()) writes.insert(n);
  }
  for (size_t i = at->front() + 1; i < at->back(); ++i) {
    if (std::find(at->begin(), at->end(), i) != at->end()) continue;
    const OpDesc& op = *block.Op(i);
    for (const auto& n : op.OutputArgumentNames())
      if (n != kEmptyVarName && (reads.count(n) || writes.count(n))) return false;
    for (const auto& n : op.InputArgumentNames())
      if (n != kEmptyVarName && writes.count(n)) return false;
  }
  return true;
}

// Whether fusing `matched` into an op of `fused_type` would keep one of
// them in float32 that the bfloat16 pass would have run in bfloat16.
bool LosesLowPrecision(const OpRegistry& registry, const std::string& fused_type,
                       const std::vector<const OpDesc*>& matched) {
  auto low = [&](const std::string& type) {
    const OpInfo* info = registry.Find(type);
    return info && info->traits.precision == OpPrecision::kLow &&
           registry.FindKernel(type, DeviceType::kCPU, DType::kBFloat16) != nullptr;
  };
  if (low(fused_type)) return false;
  return std::any_of(matched.begin(), matched.end(), [&](const OpDesc* op) { return low(op->Type()); });
}

}  // namespace

size_t FuseOps(ProgramDesc& program, const std::unordered_set<std::string>& keep, bool bf16_next) {
  auto registry = CurrentRegistry();
  std::unordered_map<std::string, std::vector<Candidate>> by_first;  // chain[0] -> patterns
  for (const std::string& type : registry->OpTypes()) {
    const OpInfo& info = registry->Get(type);
    for (const FusionPattern& p : info.fusions) by_first[p.chain.front()].push_back({&info.schema.type, &p});
  }

  size_t fused = 0;
  for (size_t b = 0; b < program.Size(); ++b) {
    BlockDesc& block = *program.Block(b);
    for (size_t i = 0; i < block.OpSize(); ++i) {
      auto cands = by_first.find(block.Op(i)->Type());
      if (cands == by_first.end()) continue;
      // Readers and writers over the whole program: sub-blocks read outer
      // vars by name. Recounted per match, as fusing changes them.
      std::unordered_map<std::string, int> readers, writers;
      for (size_t bb = 0; bb < program.Size(); ++bb)
        for (const auto& op : program.Block(bb)->AllOps()) {
          for (const auto& n : op->InputArgumentNames()) ++readers[n];
          for (const auto& n : op->OutputArgumentNames()) ++writers[n];
        }
      for (const Candidate& c : cands->second) {
        std::vector<size_t> at;
        if (!Match(block, i, *c.pattern, readers, writers, keep, &at)) continue;
        std::vector<const OpDesc*> matched;
        for (size_t k : at) matched.push_back(block.Op(k));
        if (c.pattern->applies && !c.pattern->applies(block, matched)) continue;
        if (bf16_next && LosesLowPrecision(*registry, *c.fused_type, matched)) continue;
        std::unique_ptr<OpDesc> op = c.pattern->fuse(matched);
        if (!op) continue;
        NABLA_ENFORCE(op->Type() == *c.fused_type, kRuntime, "the fusion pattern of op '", *c.fused_type,
                      "' built an op of type '", op->Type(), "'");
        FillDefaultAttrs(*op, *registry, &program);
        op->SetPos(matched.back()->Pos());
        std::vector<std::string> links;
        for (size_t k = 0; k + 1 < matched.size(); ++k)
          for (const auto& n : matched[k]->OutputArgumentNames())
            if (n != kEmptyVarName) links.push_back(n);
        const size_t last = at.back();
        block.RemoveOps(last, last + 1);
        block.InsertOp(last, std::move(op));
        for (size_t k = at.size() - 1; k-- > 0;) block.RemoveOps(at[k], at[k] + 1);
        // Links the fused op no longer writes are gone; drop the vars the
        // loader or inference created for them.
        const OpDesc& placed = *block.Op(last - (at.size() - 1));
        for (const auto& n : links) {
          const VarDesc* v = block.FindVar(n);
          if (v && !v->Declared() && !Contains(placed.OutputArgumentNames(), n)) block.RemoveVar(n);
        }
        ++fused;
        --i;  // look again from the fused op's predecessor slot
        break;
      }
    }
  }
  // Then the rewrites ops declare for what a chain cannot express, ops in
  // name order.
  for (const std::string& type : registry->OpTypes()) {
    for (const ProgramPass& pass : registry->Get(type).forward_passes) {
      try {
        fused += pass.run(program, keep);
      } catch (const Error& e) {
        throw Error(e.kind(), StrCat("the fusion pass '", pass.name, "' of op '", type, "': ", e.what()));
      }
    }
  }
  return fused;
}

size_t FuseGradOps(ProgramDesc& program, const std::unordered_set<std::string>& keep) {
  auto registry = CurrentRegistry();
  size_t changed = 0;
  for (const std::string& type : registry->OpTypes()) {
    for (const ProgramPass& pass : registry->Get(type).grad_passes) {
      try {
        changed += pass.run(program, keep);
      } catch (const Error& e) {
        throw Error(e.kind(), StrCat("the after-backward pass '", pass.name, "' of op '", type, "': ", e.what()));
      }
    }
  }
  return changed;
}

Tensor EvaluateOnHost(const BlockDesc& block, const std::vector<size_t>& ops, const std::string& var) {
  const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  std::unordered_set<std::string> written;
  for (size_t k = 0; k < ops.size(); ++k) {
    const size_t i = ops[k];
    NABLA_ENFORCE(i < block.OpSize() && (k == 0 || i > ops[k - 1]), kInvalidArgument, "EvaluateOnHost: op ", i,
                  " of a block of ", block.OpSize(), " ops (indices must ascend)");
    const OpDesc& op = *block.Op(i);
    const OpInfo* info = registry->Find(op.Type());
    NABLA_ENFORCE(info, kNotFound, "EvaluateOnHost: op ", i, " is of type '", op.Type(), "', which is not registered");
    NABLA_ENFORCE(!info->traits.random && !info->traits.has_sub_block && !info->traits.control_flow, kInvalidArgument,
                  "EvaluateOnHost: op ", i, " ('", op.Type(),
                  "') is not constant: it draws random numbers or runs blocks");
    for (const auto& in : op.InputArgumentNames())
      NABLA_ENFORCE(in == kEmptyVarName || written.count(in), kInvalidArgument, "EvaluateOnHost: op ", i, " ('",
                    op.Type(), "') reads '", in, "', which no earlier op of the list writes: not a constant");
    for (const auto& out : op.OutputArgumentNames()) written.insert(out);
  }
  NABLA_ENFORCE(written.count(var), kInvalidArgument, "EvaluateOnHost: no op of the list writes '", var, "'");
  Scope scope;
  const RunContext run;
  for (size_t i : ops) {
    for (const auto& n : block.Op(i)->OutputArgumentNames()) scope.Var(n);
    RunOp(*block.Op(i), scope, HostDevice(), run);
  }
  const Variable* v = scope.FindVar(var);
  NABLA_ENFORCE(v && v->Type() == VarType::kDense && v->GetTensor().IsInitialized(), kInvalidArgument,
                "EvaluateOnHost: the ops left '", var, "' without a dense value");
  Tensor host;
  host.CopyFrom(v->GetTensor(), HostDevice());
  return host;
}

}  // namespace nabla
