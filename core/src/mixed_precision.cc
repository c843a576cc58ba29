#include "nabla/mixed_precision.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"

namespace nabla {
namespace {

constexpr const char* kLowSuffix = "@BF16";

bool IsFloat32(const VarDesc* v) { return v && v->HasDType() && v->GetDType() == DType::kFloat32; }

// The op registered with OpBuilder::DTypeCast() (math_ops' cast): the core
// names no op, so the pass asks the registry which one converts dtypes.
std::string CastOpType(const OpRegistry& registry) {
  std::string found;
  for (const std::string& type : registry.OpTypes()) {
    const OpInfo* info = registry.Find(type);
    if (info && info->traits.dtype_cast) {
      NABLA_ENFORCE(found.empty(), kAlreadyExists, "mixed precision: two ops declare DTypeCast(), '", found, "' and '",
                    type, "'; load only one");
      found = type;
    }
  }
  return found;
}

std::unique_ptr<OpDesc> MakeCast(const std::string& type, const std::string& x, const std::string& out, DType from,
                                 DType to, SourcePos pos) {
  NABLA_ENFORCE(!type.empty(), kNotFound,
                "mixed precision (precision: bf16) needs an op registered with DTypeCast() (math_ops' cast), but "
                "no loaded plugin has one");
  auto op = std::make_unique<OpDesc>(
      type, VarNameMap{{"X", {x}}}, VarNameMap{{"Out", {out}}},
      AttributeMap{{"in_dtype", std::string(DTypeName(from))}, {"out_dtype", std::string(DTypeName(to))}});
  op->SetPos(pos);  // errors in a cast point at the op it serves
  return op;
}

// A fresh var of `block` shaped like `like`, holding `dtype`.
VarDesc* MakeVar(BlockDesc& block, const std::string& base, const VarDesc& like, DType dtype) {
  std::string name = base;
  for (int i = 1; block.HasVarRecursive(name); ++i) name = base + "@" + std::to_string(i);
  VarDesc* v = block.Var(name);
  v->SetShape(like.GetShape());
  v->SetDType(dtype);
  v->MarkDTypeKnown();
  v->SetStopGradient(like.StopGradient());
  return v;
}

// The op runs in bfloat16 when it asks for it, has the kernel, reads only
// float32 floating inputs (at least one) and writes float32 floating outputs
// that it does not also read.
bool Converts(const OpDesc& op, const OpInfo& info, const OpRegistry& registry, const BlockDesc& block,
              DeviceType device) {
  if (info.traits.precision != OpPrecision::kLow || info.traits.has_sub_block || info.traits.control_flow) return false;
  if (!registry.FindKernel(op.Type(), device, DType::kBFloat16)) return false;
  size_t floats = 0;
  std::vector<std::string> ins = op.InputArgumentNames();
  for (const auto& n : ins) {
    if (n == kEmptyVarName) continue;
    const VarDesc* v = block.FindVarRecursive(n);
    if (!v || !v->HasDType() || v->Type() != VarType::kDense) return false;
    if (!IsFloating(v->GetDType())) continue;
    if (v->GetDType() != DType::kFloat32) return false;
    ++floats;
  }
  for (const auto& n : op.OutputArgumentNames()) {
    if (n == kEmptyVarName) continue;
    if (std::find(ins.begin(), ins.end(), n) != ins.end()) return false;
    const VarDesc* v = block.FindVarRecursive(n);
    if (v && v->HasDType() && IsFloating(v->GetDType()) && v->GetDType() != DType::kFloat32) return false;
  }
  return floats > 0;
}

// Where the program already holds bfloat16 vars (a cast the user wrote), an
// op that must stay float32, or that has no bfloat16 kernel, reads them
// through a cast back to float32.
size_t WidenInputs(OpDesc& op, const OpInfo& info, const OpRegistry& registry, const std::string& cast,
                   BlockDesc& block, DeviceType device, size_t* at) {
  if (info.traits.has_sub_block || info.traits.control_flow) return 0;
  if (info.traits.precision != OpPrecision::kFloat32 && registry.FindKernel(op.Type(), device, DType::kBFloat16))
    return 0;
  size_t casts = 0;
  for (auto& [slot, args] : op.MutableInputs()) {
    for (auto& arg : args) {
      const VarDesc* v = arg == kEmptyVarName ? nullptr : block.FindVarRecursive(arg);
      if (!v || !v->HasDType() || v->GetDType() != DType::kBFloat16 || v->Type() != VarType::kDense) continue;
      VarDesc* wide = MakeVar(block, arg + "@FP32", *v, DType::kFloat32);
      block.InsertOp((*at)++, MakeCast(cast, arg, wide->Name(), DType::kBFloat16, DType::kFloat32, op.Pos()));
      arg = wide->Name();
      ++casts;
    }
  }
  return casts;
}

bool DeclaresForceFp32(const OpInfo& info) {
  const AttrDef* a = info.schema.FindAttr(kForceFp32OutputAttr);
  return a != nullptr && a->type == AttrType::kBool;
}

// Readers and writers of every var name, over all blocks: a sub-block reads
// its parents' vars by name.
struct VarUse {
  std::unordered_map<std::string, std::vector<const OpDesc*>> readers;
  std::unordered_map<std::string, size_t> writers;
};

VarUse CountUses(const ProgramDesc& program) {
  VarUse use;
  for (size_t b = 0; b < program.Size(); ++b) {
    for (const auto& op : program.Block(b)->AllOps()) {
      for (const auto& n : op->InputArgumentNames()) use.readers[n].push_back(op.get());
      for (const auto& n : op->OutputArgumentNames()) ++use.writers[n];
    }
  }
  return use;
}

// The cast that alone reads `var` (bfloat16, written by the op at `at` only)
// and widens it to a float32 var nothing else writes and nothing reads before
// the cast; null when there is none.
const OpDesc* SoleWideningCast(const OpRegistry& registry, const BlockDesc& block, size_t at, const std::string& var,
                               const VarUse& use) {
  const VarDesc* v = block.FindVar(var);
  if (!v || v->Persistable() || v->Type() != VarType::kDense || !v->HasDType() || v->GetDType() != DType::kBFloat16)
    return nullptr;
  auto w = use.writers.find(var);
  auto r = use.readers.find(var);
  if (w == use.writers.end() || w->second != 1 || r == use.readers.end() || r->second.size() != 1) return nullptr;
  const OpDesc* cast = r->second.front();
  const OpInfo* info = registry.Find(cast->Type());
  if (!info || !info->traits.dtype_cast || cast->Outputs().size() != 1) return nullptr;
  const std::vector<std::string> outs = cast->OutputArgumentNames();
  if (outs.size() != 1) return nullptr;
  const VarDesc* wide = block.FindVarRecursive(outs[0]);
  auto ww = use.writers.find(outs[0]);
  if (!IsFloat32(wide) || wide->Type() != VarType::kDense || ww == use.writers.end() || ww->second != 1) return nullptr;
  // The op will write the wide var where it wrote the narrow one: nothing in
  // between may read it, and the cast must be in this block, after the op.
  for (size_t i = at + 1; i < block.OpSize(); ++i) {
    const OpDesc* op = block.Op(i);
    if (op == cast) return cast;
    for (const auto& n : op->InputArgumentNames())
      if (n == outs[0]) return nullptr;
  }
  return nullptr;
}

}  // namespace

size_t FoldBf16Casts(ProgramDesc& program, DeviceType device) {
  const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  BlockDesc& block = *program.Root();
  const VarUse use = CountUses(program);
  std::unordered_set<const OpDesc*> dropped;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    OpDesc& op = *block.Op(i);
    const OpInfo* info = registry->Find(op.Type());
    if (!info || !DeclaresForceFp32(*info) || !registry->FindKernel(op.Type(), device, DType::kBFloat16)) continue;
    if (op.HasAttr(kForceFp32OutputAttr) && op.Attr<bool>(kForceFp32OutputAttr)) continue;
    std::vector<std::pair<std::string, const OpDesc*>> casts;  // (narrow var, its cast)
    bool all = true;
    for (const auto& n : op.OutputArgumentNames()) {
      if (n == kEmptyVarName) continue;
      const OpDesc* cast = SoleWideningCast(*registry, block, i, n, use);
      if (!cast) {
        all = false;
        break;
      }
      casts.emplace_back(n, cast);
    }
    // One attribute switches every output: fold all or none.
    if (!all || casts.empty()) continue;
    for (auto& [slot, args] : op.MutableOutputs()) {
      for (auto& arg : args) {
        for (const auto& [narrow, cast] : casts) {
          if (arg != narrow) continue;
          arg = cast->OutputArgumentNames()[0];
          dropped.insert(cast);
          block.RemoveVar(narrow);
          break;
        }
      }
    }
    op.SetAttr(kForceFp32OutputAttr, true);
  }
  for (size_t i = block.OpSize(); i-- > 0;)
    if (dropped.count(block.Op(i))) block.RemoveOps(i, i + 1);
  return dropped.size();
}

MixedPrecisionStats ApplyBf16MixedPrecision(ProgramDesc& program, DeviceType device) {
  const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  const std::string cast = CastOpType(*registry);
  BlockDesc& block = *program.Root();
  MixedPrecisionStats stats;
  size_t serial = 0;
  // Once a user's bfloat16 var is widened for a reader, the dtypes that
  // inference gave the ops after it at load time are stale (softmax of the
  // widened var writes float32, and so does the mean of that): each later op
  // is inferred again before the pass looks at it.
  bool stale = false;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    OpDesc& op = *block.Op(i);
    const OpInfo* info = registry->Find(op.Type());
    if (!info) continue;
    if (stale && !info->traits.has_sub_block && !info->traits.control_flow) InferOpAtBuildTime(op, block, *registry);
    if (!Converts(op, *info, *registry, block, device)) {
      const size_t widened = WidenInputs(op, *info, *registry, cast, block, device, &i);
      if (widened > 0) {
        InferOpAtBuildTime(op, block, *registry);
        stale = true;
      }
      stats.casts += widened;
      continue;
    }
    const SourcePos pos = op.Pos();
    // Inputs: one cast per (var, consumer), so each consumer's gradient comes
    // back through its own cast and the contributions meet in float32.
    for (auto& [slot, args] : op.MutableInputs()) {
      for (auto& arg : args) {
        const VarDesc* v = arg == kEmptyVarName ? nullptr : block.FindVarRecursive(arg);
        if (!IsFloat32(v)) continue;
        VarDesc* low = MakeVar(block, arg + kLowSuffix + "@" + std::to_string(serial++), *v, DType::kBFloat16);
        block.InsertOp(i++, MakeCast(cast, arg, low->Name(), DType::kFloat32, DType::kBFloat16, pos));
        ++stats.casts;
        arg = low->Name();
      }
    }
    // Outputs: written in bfloat16 and cast back at once, so every reader of
    // the original var still sees float32. Except an output that the op's
    // own inference keeps float32 with bfloat16 inputs (flash_attn's
    // softmax_lse: a statistic backward reads, which rounding would spoil):
    // the op writes the original var itself.
    std::vector<std::pair<std::string*, std::string>> back;  // (arg now naming the bf16 var, original)
    for (auto& [slot, args] : op.MutableOutputs()) {
      for (auto& arg : args) {
        VarDesc* v = arg == kEmptyVarName ? nullptr : block.FindVarRecursive(arg);
        if (!v) continue;
        if (!v->HasDType()) {  // inference has not reached it yet: the op writes X's dtype, float32
          v->SetDType(DType::kFloat32);
          v->MarkDTypeKnown();
        }
        if (!IsFloat32(v)) continue;
        VarDesc* low = MakeVar(block, arg + kLowSuffix, *v, DType::kBFloat16);
        back.emplace_back(&arg, arg);
        arg = low->Name();
      }
    }
    InferOpAtBuildTime(op, block, *registry);
    for (const auto& [arg, orig] : back) {
      if (IsFloat32(block.FindVar(*arg))) {
        block.RemoveVar(*arg);
        *arg = orig;
        continue;
      }
      block.InsertOp(++i, MakeCast(cast, *arg, orig, DType::kBFloat16, DType::kFloat32, pos));
      ++stats.casts;
    }
    ++stats.low_ops;
  }
  return stats;
}

}  // namespace nabla
