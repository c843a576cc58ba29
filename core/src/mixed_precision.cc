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

// Whether `op` is the dtype cast from `from` to `to` on dense vars, one in
// and one out.
bool IsCast(const OpRegistry& registry, const BlockDesc& block, const OpDesc& op, DType from, DType to) {
  const OpInfo* info = registry.Find(op.Type());
  if (!info || !info->traits.dtype_cast) return false;
  const std::vector<std::string> ins = op.InputArgumentNames(), outs = op.OutputArgumentNames();
  if (ins.size() != 1 || outs.size() != 1) return false;
  const VarDesc* in = block.FindVarRecursive(ins[0]);
  const VarDesc* out = block.FindVarRecursive(outs[0]);
  return in && out && in->Type() == VarType::kDense && out->Type() == VarType::kDense && in->HasDType() &&
         out->HasDType() && in->GetDType() == from && out->GetDType() == to;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Positions of block 0's ops.
std::unordered_map<const OpDesc*, size_t> Positions(const BlockDesc& block) {
  std::unordered_map<const OpDesc*, size_t> at;
  for (size_t i = 0; i < block.OpSize(); ++i) at[block.Op(i)] = i;
  return at;
}

// A var of block 0 that a pass may make disappear: dense, not persistable,
// not kept, written once.
bool Removable(const BlockDesc& block, const std::string& name, const VarUse& use,
               const std::unordered_set<std::string>& keep) {
  const VarDesc* v = block.FindVar(name);
  auto w = use.writers.find(name);
  return v && !v->Persistable() && v->Type() == VarType::kDense && !keep.count(name) && w != use.writers.end() &&
         w->second == 1;
}

// The one op reading `name` (once), or null.
const OpDesc* SoleReader(const std::string& name, const VarUse& use) {
  auto r = use.readers.find(name);
  return r == use.readers.end() || r->second.size() != 1 ? nullptr : r->second.front();
}

// The bfloat16 var that the widening cast writing `wide` (a var only `op`
// reads, once, written by that cast alone, before position `at`) reads;
// empty when `wide` is no such var.
std::string NarrowSource(const OpRegistry& registry, const BlockDesc& block, const OpDesc& op, size_t at,
                         const std::string& wide, const VarUse& use, const std::unordered_set<std::string>& keep,
                         const std::unordered_map<const OpDesc*, size_t>& pos, const OpDesc** cast) {
  if (!Removable(block, wide, use, keep) || SoleReader(wide, use) != &op) return "";
  for (size_t i = 0; i < at; ++i) {
    const OpDesc* w = block.Op(i);
    if (!Contains(w->OutputArgumentNames(), wide)) continue;
    if (!IsCast(registry, block, *w, DType::kBFloat16, DType::kFloat32) || pos.at(w) >= at) return "";
    *cast = w;
    return w->InputArgumentNames()[0];
  }
  return "";
}

// The bfloat16 var of the narrowing cast that alone reads `wide` (written by
// `op` alone, at position `at`); empty when there is none.
std::string NarrowSink(const OpRegistry& registry, const BlockDesc& block, size_t at, const std::string& wide,
                       const VarUse& use, const std::unordered_set<std::string>& keep,
                       const std::unordered_map<const OpDesc*, size_t>& pos, const OpDesc** cast) {
  if (!Removable(block, wide, use, keep)) return "";
  const OpDesc* r = SoleReader(wide, use);
  if (!r || !pos.count(r) || pos.at(r) <= at || !IsCast(registry, block, *r, DType::kFloat32, DType::kBFloat16))
    return "";
  const std::string narrow = r->OutputArgumentNames()[0];
  auto w = use.writers.find(narrow);
  const VarDesc* v = block.FindVar(narrow);
  if (!v || v->Persistable() || w == use.writers.end() || w->second != 1) return "";
  *cast = r;
  return narrow;
}

// The op of block 0 that alone writes `name`, and its position; null if
// none or several.
const OpDesc* SoleWriter(const BlockDesc& block, const std::string& name, const VarUse& use, size_t* at) {
  auto w = use.writers.find(name);
  if (w == use.writers.end() || w->second != 1) return nullptr;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    if (!Contains(block.Op(i)->OutputArgumentNames(), name)) continue;
    *at = i;
    return block.Op(i);
  }
  return nullptr;
}

// Whether an op declares that it runs in bfloat16 wherever its inputs come
// in bfloat16, with the bfloat16 kernels of itself and its default grad op
// (one whose grad maker makes other ops is left alone).
bool FollowsIntoBf16(const OpRegistry& registry, const OpDesc& op, DeviceType device) {
  const OpInfo* info = registry.Find(op.Type());
  if (!info || info->traits.precision != OpPrecision::kFollowInputs || info->traits.has_sub_block ||
      info->traits.control_flow || info->traits.dtype_cast)
    return false;
  if (!registry.FindKernel(op.Type(), device, DType::kBFloat16)) return false;
  return !info->HasGradient() || registry.FindKernel(op.Type() + "_grad", device, DType::kBFloat16) != nullptr;
}

// The floating dense args of `names` in block.
std::vector<std::string> FloatingArgs(const BlockDesc& block, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    const VarDesc* v = n == kEmptyVarName ? nullptr : block.FindVarRecursive(n);
    if (v && v->HasDType() && v->Type() == VarType::kDense && IsFloating(v->GetDType())) out.push_back(n);
  }
  return out;
}

// The narrowing cast at `at`, when it alone reads the one floating output of
// an op that moves data (OpTraits::moves_data: reshape), runs before that
// op instead: it narrows the op's one floating input into a new bfloat16
// var, and the op, in bfloat16, writes what the cast wrote. Exact: the op
// moves elements, and the cast rounds each alike wherever it runs.
bool SinkNarrowingCast(const OpRegistry& registry, const std::string& cast_type, BlockDesc& block, size_t at,
                       const VarUse& use, const std::unordered_set<std::string>& keep, DeviceType device,
                       size_t* moved_to) {
  OpDesc& cast = *block.Op(at);
  if (!IsCast(registry, block, cast, DType::kFloat32, DType::kBFloat16)) return false;
  const std::string wide_out = cast.InputArgumentNames()[0], narrow_out = cast.OutputArgumentNames()[0];
  if (!Removable(block, wide_out, use, keep) || SoleReader(wide_out, use) != &cast) return false;
  size_t m_at = 0;
  const OpDesc* m = SoleWriter(block, wide_out, use, &m_at);
  if (!m || m_at >= at || !FollowsIntoBf16(registry, *m, device) || !registry.Find(m->Type())->traits.moves_data)
    return false;
  const std::vector<std::string> ins = FloatingArgs(block, m->InputArgumentNames());
  const std::vector<std::string> outs = FloatingArgs(block, m->OutputArgumentNames());
  if (ins.size() != 1 || outs != std::vector<std::string>{wide_out}) return false;
  const std::string wide_in = ins[0];
  const VarDesc* in = block.FindVarRecursive(wide_in);
  if (in->GetDType() != DType::kFloat32) return false;
  OpDesc trial = *m;
  VarDesc* narrow_in = MakeVar(block, wide_in + kLowSuffix, *in, DType::kBFloat16);
  trial.RenameInput(wide_in, narrow_in->Name());
  trial.RenameOutput(wide_out, narrow_out);
  VarDesc* nv = block.FindVar(narrow_out);
  const Shape shape = nv->GetShape();
  bool accepted = true;
  try {
    InferOpAtBuildTime(trial, block, registry);
    accepted = nv->GetDType() == DType::kBFloat16;
  } catch (const Error&) {
    accepted = false;
  }
  if (!accepted) {
    nv->SetShape(shape);
    nv->SetDType(DType::kBFloat16);
    nv->MarkDTypeKnown();
    block.RemoveVar(narrow_in->Name());
    return false;
  }
  const std::string narrow_name = narrow_in->Name();
  const SourcePos pos = cast.Pos();
  OpDesc& mm = *block.Op(m_at);
  mm.RenameInput(wide_in, narrow_name);
  mm.RenameOutput(wide_out, narrow_out);
  block.RemoveOps(at, at + 1);
  block.InsertOp(m_at, MakeCast(cast_type, wide_in, narrow_name, DType::kFloat32, DType::kBFloat16, pos));
  *moved_to = m_at;
  const VarDesc* old = block.FindVar(wide_out);
  if (old && !old->Declared()) block.RemoveVar(wide_out);
  return true;
}

// A widening cast followed by a narrowing cast of its output (its one
// reader) is no conversion at all: the narrowing cast's readers read the
// bfloat16 var the widening cast read (its one reader), and both casts go.
bool DropRoundTrip(const OpRegistry& registry, BlockDesc& block, size_t at, const VarUse& use,
                   const std::unordered_set<std::string>& keep) {
  OpDesc& narrow = *block.Op(at);
  if (!IsCast(registry, block, narrow, DType::kFloat32, DType::kBFloat16)) return false;
  const std::string wide = narrow.InputArgumentNames()[0], narrow_out = narrow.OutputArgumentNames()[0];
  if (!Removable(block, wide, use, keep) || SoleReader(wide, use) != &narrow) return false;
  size_t w_at = 0;
  const OpDesc* widen = SoleWriter(block, wide, use, &w_at);
  if (!widen || w_at >= at || !IsCast(registry, block, *widen, DType::kBFloat16, DType::kFloat32)) return false;
  const std::string source = widen->InputArgumentNames()[0];
  if (SoleReader(source, use) != widen || !Removable(block, narrow_out, use, keep)) return false;
  // Its readers are renamed in this block: a sub-block's would be missed.
  size_t here = 0;
  for (size_t i = at + 1; i < block.OpSize(); ++i) {
    const auto ins = block.Op(i)->InputArgumentNames();
    here += static_cast<size_t>(std::count(ins.begin(), ins.end(), narrow_out));
  }
  auto r = use.readers.find(narrow_out);
  if (r != use.readers.end() && r->second.size() != here) return false;
  for (size_t i = at + 1; i < block.OpSize(); ++i) block.Op(i)->RenameInput(narrow_out, source);
  block.RemoveOps(at, at + 1);
  block.RemoveOps(w_at, w_at + 1);
  for (const std::string& n : {wide, narrow_out}) {
    const VarDesc* v = block.FindVar(n);
    if (v && !v->Declared()) block.RemoveVar(n);
  }
  return true;
}

// One op of block 0 between a widening and a narrowing cast, made to run
// in bfloat16 (see ElideBf16Casts); false, leaving it as it was, where it
// cannot.
bool RunInBf16(const OpRegistry& registry, BlockDesc& block, size_t at, const VarUse& use,
               const std::unordered_set<std::string>& keep, DeviceType device,
               std::unordered_set<const OpDesc*>* dropped) {
  OpDesc& op = *block.Op(at);
  if (!FollowsIntoBf16(registry, op, device)) return false;
  const OpInfo* info = registry.Find(op.Type());
  const auto pos = Positions(block);
  std::vector<std::pair<std::string, std::string>> ins, outs;  // (float32 var, its bfloat16 var)
  std::vector<const OpDesc*> casts;
  bool first_floating = true;  // the input the kernel's dtype comes from (the executor's FirstDenseInput)
  for (const SlotDef& slot : info->schema.inputs) {
    const bool may_stay = Contains(info->traits.bf16_float32_inputs, slot.name);
    for (const std::string& arg : op.Input(slot.name)) {
      const VarDesc* v = arg == kEmptyVarName ? nullptr : block.FindVarRecursive(arg);
      if (!v || !v->HasDType() || v->Type() != VarType::kDense || !IsFloating(v->GetDType())) continue;
      const bool first = first_floating;
      first_floating = false;
      if (v->GetDType() == DType::kBFloat16) continue;
      if (v->GetDType() != DType::kFloat32) return false;
      const OpDesc* cast = nullptr;
      const std::string narrow = NarrowSource(registry, block, op, at, arg, use, keep, pos, &cast);
      if (narrow.empty()) {
        if (first || !may_stay) return false;
        continue;
      }
      ins.emplace_back(arg, narrow);
      casts.push_back(cast);
    }
  }
  for (const std::string& arg : op.OutputArgumentNames()) {
    const VarDesc* v = arg == kEmptyVarName ? nullptr : block.FindVarRecursive(arg);
    if (!v || !v->HasDType() || !IsFloating(v->GetDType())) continue;
    if (v->GetDType() != DType::kFloat32) return false;
    const OpDesc* cast = nullptr;
    const std::string narrow = NarrowSink(registry, block, at, arg, use, keep, pos, &cast);
    if (narrow.empty()) return false;
    outs.emplace_back(arg, narrow);
    casts.push_back(cast);
  }
  if (ins.empty() || outs.empty()) return false;
  // The op's own inference decides whether it takes this mix of dtypes and
  // writes bfloat16: tried on a copy, the narrow outputs' descs restored if
  // it refuses.
  OpDesc trial = op;
  for (const auto& [wide, narrow] : ins) trial.RenameInput(wide, narrow);
  for (const auto& [wide, narrow] : outs) trial.RenameOutput(wide, narrow);
  std::vector<std::pair<VarDesc*, std::pair<Shape, DType>>> saved;
  for (const auto& [wide, narrow] : outs) {
    VarDesc* v = block.FindVar(narrow);
    saved.push_back({v, {v->GetShape(), v->GetDType()}});
  }
  bool accepted = true;
  try {
    InferOpAtBuildTime(trial, block, registry);
    for (const auto& [wide, narrow] : outs)
      accepted = accepted && block.FindVar(narrow)->GetDType() == DType::kBFloat16;
  } catch (const Error&) {
    accepted = false;
  }
  if (!accepted) {
    for (auto& [v, sd] : saved) {
      v->SetShape(sd.first);
      v->SetDType(sd.second);
      v->MarkDTypeKnown();
    }
    return false;
  }
  for (const auto& [wide, narrow] : ins) op.RenameInput(wide, narrow);
  for (const auto& [wide, narrow] : outs) op.RenameOutput(wide, narrow);
  for (const OpDesc* c : casts) dropped->insert(c);
  for (const auto& pair : ins) {
    const VarDesc* v = block.FindVar(pair.first);
    if (v && !v->Declared()) block.RemoveVar(pair.first);
  }
  for (const auto& pair : outs) {
    const VarDesc* v = block.FindVar(pair.first);
    if (v && !v->Declared()) block.RemoveVar(pair.first);
  }
  return true;
}

// Whether every reader of `var` (bfloat16, written once, by the op at `at`)
// runs its bfloat16 kernel and takes `var` in float32 as well: it is read
// after `at` in block 0 only, through slots the reader declares with
// OpBuilder::Bf16TakesFloat32, and the reader's kernel dtype comes from
// another, bfloat16 input.
bool ReadersTakeFloat32(const OpRegistry& registry, const BlockDesc& block, size_t at, const std::string& var,
                        const VarUse& use, const std::unordered_map<const OpDesc*, size_t>& pos, DeviceType device) {
  const VarDesc* v = block.FindVar(var);
  if (!v || v->Persistable() || v->Type() != VarType::kDense || !v->HasDType() || v->GetDType() != DType::kBFloat16)
    return false;
  auto w = use.writers.find(var);
  auto r = use.readers.find(var);
  if (w == use.writers.end() || w->second != 1 || r == use.readers.end() || r->second.empty()) return false;
  for (const OpDesc* reader : r->second) {
    auto p = pos.find(reader);
    if (p == pos.end() || p->second <= at) return false;
    const OpInfo* info = registry.Find(reader->Type());
    if (!info || info->traits.dtype_cast || !registry.FindKernel(reader->Type(), device, DType::kBFloat16))
      return false;
    bool kernel_dtype_seen = false;
    for (const SlotDef& slot : info->schema.inputs) {
      for (const std::string& arg : reader->Input(slot.name)) {
        if (arg == var && !Contains(info->traits.bf16_float32_inputs, slot.name)) return false;
        const VarDesc* in = arg == kEmptyVarName ? nullptr : block.FindVarRecursive(arg);
        if (kernel_dtype_seen || !in || !in->HasDType() || in->Type() != VarType::kDense || !IsFloating(in->GetDType()))
          continue;
        kernel_dtype_seen = true;
        if (arg == var || in->GetDType() != DType::kBFloat16) return false;
      }
    }
  }
  return true;
}

// Takes the narrowing cast at `at` out of `program`: as the second half of
// a round trip, as the narrowing end of an op made to run in bfloat16, or
// moved up through an op that moves data and taken out there. Returns the
// number of rewrites; 0 when the cast stays, `program` then possibly half
// rewritten (the caller works on a copy).
size_t TakeOutNarrowingCast(const OpRegistry& registry, const std::string& cast_type, ProgramDesc& program, size_t at,
                            const std::unordered_set<std::string>& keep, DeviceType device) {
  BlockDesc& block = *program.Root();
  const VarUse use = CountUses(program);
  if (DropRoundTrip(registry, block, at, use, keep)) return 1;
  size_t w_at = 0;
  if (SoleWriter(block, block.Op(at)->InputArgumentNames()[0], use, &w_at)) {
    std::unordered_set<const OpDesc*> dropped;
    if (RunInBf16(registry, block, w_at, use, keep, device, &dropped)) {
      for (size_t i = block.OpSize(); i-- > 0;)
        if (dropped.count(block.Op(i))) block.RemoveOps(i, i + 1);
      return 1;
    }
  }
  size_t moved = 0;
  if (!SinkNarrowingCast(registry, cast_type, block, at, use, keep, device, &moved)) return 0;
  const size_t rest = TakeOutNarrowingCast(registry, cast_type, program, moved, keep, device);
  return rest == 0 ? 0 : rest + 1;
}

// After the backward part: each consumer of a float32 var got its own
// narrowing cast (ApplyBf16MixedPrecision), so that the consumers'
// gradients came back through their own casts and met in float32. Once the
// gradients exist those casts are copies of one another: a later cast of a
// var that nothing wrote since an earlier one's is dropped and its readers
// read the earlier one's output (the attention's q, k and v products each
// cast the same layer_norm output: two of the three passes go, and their
// bfloat16 copies, which the GEMMs' grad ops keep alive until backward).
// Returns the number of casts dropped.
size_t ShareNarrowingCasts(const OpRegistry& registry, ProgramDesc& program) {
  BlockDesc& block = *program.Root();
  const VarUse use = CountUses(program);
  auto written_once = [&](const std::string& name) {
    auto w = use.writers.find(name);
    return w != use.writers.end() && w->second == 1;
  };
  std::unordered_map<std::string, std::string> cast_of;  // float32 var -> the bfloat16 var its first cast wrote
  std::unordered_map<std::string, std::string> renamed;  // dropped cast's output -> the shared one
  std::unordered_set<const OpDesc*> dropped;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    const OpDesc& op = *block.Op(i);
    const OpInfo* info = registry.Find(op.Type());
    if (info && IsCast(registry, block, op, DType::kFloat32, DType::kBFloat16)) {
      const std::string in = op.InputArgumentNames()[0];
      const std::string out = op.OutputArgumentNames()[0];
      const VarDesc* v = block.FindVar(out);
      if (v && !v->Persistable() && written_once(out)) {
        auto [it, first] = cast_of.emplace(in, out);
        if (!first) {
          renamed.emplace(out, it->second);
          dropped.insert(&op);
          continue;
        }
      }
    }
    // A var written again (or by a sub-block, which may write any) is no
    // longer what its earlier cast copied.
    if (!info || info->traits.has_sub_block || info->traits.control_flow) {
      cast_of.clear();
      continue;
    }
    for (const auto& n : op.OutputArgumentNames()) cast_of.erase(n);
  }
  if (dropped.empty()) return 0;
  for (size_t b = 0; b < program.Size(); ++b)
    for (const auto& op : program.Block(b)->AllOps())
      for (auto& [slot, args] : op->MutableInputs())
        for (auto& arg : args) {
          auto it = renamed.find(arg);
          if (it != renamed.end()) arg = it->second;
        }
  for (size_t i = block.OpSize(); i-- > 0;)
    if (dropped.count(block.Op(i))) block.RemoveOps(i, i + 1);
  for (const auto& [gone, kept] : renamed) block.RemoveVar(gone);
  return dropped.size();
}

}  // namespace

size_t FoldBf16Casts(ProgramDesc& program, DeviceType device) {
  const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  BlockDesc& block = *program.Root();
  const VarUse use = CountUses(program);
  const auto pos = Positions(block);
  std::unordered_set<const OpDesc*> dropped;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    OpDesc& op = *block.Op(i);
    const OpInfo* info = registry->Find(op.Type());
    if (!info || !DeclaresForceFp32(*info) || !registry->FindKernel(op.Type(), device, DType::kBFloat16)) continue;
    if (op.HasAttr(kForceFp32OutputAttr) && op.Attr<bool>(kForceFp32OutputAttr)) continue;
    std::vector<std::pair<std::string, const OpDesc*>> casts;  // (narrow var, its cast)
    std::vector<std::string> in_place;                         // bfloat16 vars that become float32
    bool all = true;
    for (const auto& n : op.OutputArgumentNames()) {
      if (n == kEmptyVarName) continue;
      const OpDesc* cast = SoleWideningCast(*registry, block, i, n, use);
      if (cast) {
        casts.emplace_back(n, cast);
      } else if (ReadersTakeFloat32(*registry, block, i, n, use, pos, device)) {
        in_place.push_back(n);
      } else {
        all = false;
        break;
      }
    }
    // One attribute switches every output: fold all or none.
    if (!all || casts.empty()) continue;
    for (const std::string& n : in_place) block.FindVar(n)->SetDType(DType::kFloat32);
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
  return dropped.size() + ShareNarrowingCasts(*registry, program);
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

size_t ElideBf16Casts(ProgramDesc& program, const std::unordered_set<std::string>& keep, DeviceType device) {
  const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  const std::string cast = CastOpType(*registry);
  size_t changed = 0;
  // Each narrowing cast is tried on a copy of the program, kept where the
  // cast goes: a cast moved up through a reshape that stayed there would
  // only round the gradient of the op before it, which a GEMM's grad op
  // hands on in float32 today. Each success moves ops, so the scan starts
  // over (a few dozen casts at most).
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < program.Root()->OpSize() && !again; ++i) {
      const BlockDesc& block = *program.Root();
      if (!IsCast(*registry, block, *block.Op(i), DType::kFloat32, DType::kBFloat16)) continue;
      ProgramDesc trial = program;
      const size_t n = TakeOutNarrowingCast(*registry, cast, trial, i, keep, device);
      if (n == 0) continue;
      program = std::move(trial);
      changed += n;
      again = true;
    }
  }
  return changed;
}

}  // namespace nabla
