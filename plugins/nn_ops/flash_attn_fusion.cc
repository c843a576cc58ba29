// The fusion pass's attention rewrite (flash_attn's RewritesBeforeBackward,
// run by FuseOps of nabla/fusion.h):
// attention written as
//
//   qt = transpose(q, [0, 2, 1, 3])   (and kt, vt alike; q, k, v [B, T, H, D])
//   s  = matmul(qt, kt, transpose_Y, alpha = 1 / sqrt(D))
//        (or alpha a and then s = scale(s, scale = c), a c = 1 / sqrt(D))
//   s' = elementwise_add(s, mask)      (optional, a mask without a gradient)
//   p  = softmax(s', axis -1)
//   o  = matmul(p, vt)                 ([B, H, T, Dv])
//   out = transpose(o, [0, 2, 1, 3])   (optional)
//
// becomes flash_attn(q, k, v, attn_mask = mask) writing out (or a transpose
// of its output into o): the same values and gradients, without the
// [B, H, T, T] scores and probabilities. Only where that is exact: s, s' and
// p are read by the next op alone and are neither kept nor persistable, the
// transposes permute [0, 2, 1, 3], alpha is 1/sqrt(D) to float precision,
// softmax runs over the keys, q, k and v agree in batch and heads (matmul
// would broadcast them, flash_attn does not), nothing writes q, k, v or the
// mask between where the matched ops read them and the fused op, and no
// gradient flows into the mask (flash_attn has none for it: a fed mask must
// stop gradients). Transposes left without readers go too.
//
// One difference remains, by design: a query row whose every key the mask
// hides with -inf gets softmax's NaN unfused and flash_attn's 0 (output and
// gradients, as Paddle's and FlashAttention's kernels give) fused. Under a
// -1e9 mask such a row attends to all its keys alike in both (flash_attn
// finds that row's max and sum again rather than trust its lse).
//
// A mask that ops of the program compute from constants alone (no feed, no
// parameter, nothing random: fill_constant and tril_triu, say) is evaluated
// here once. When it is the causal pattern, 0 where key j <= i + seq_k -
// seq_q and <= -1e9 (or -inf) elsewhere, in every [seq_q, seq_k] slice,
// flash_attn gets causal: true and no mask: exp of a score minus 1e9
// underflows to exactly 0, so the probabilities are the same, and the
// hidden scores are then never computed. The ops that made the mask go when
// nothing else reads it. Other masks stay as attn_mask.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "flash_attn.h"
#include "nabla/fusion.h"
#include "nabla/plugin.h"

namespace nabla::nn {
namespace {

struct Uses {
  std::unordered_map<std::string, int> readers, writers;
  std::unordered_map<std::string, std::pair<BlockDesc*, size_t>> writer;  // the (last) op writing a var
};

Uses CountUses(ProgramDesc& program) {
  Uses u;
  for (size_t b = 0; b < program.Size(); ++b) {
    BlockDesc* block = program.Block(b);
    for (size_t i = 0; i < block->OpSize(); ++i) {
      const OpDesc& op = *block->Op(i);
      for (const auto& n : op.InputArgumentNames()) ++u.readers[n];
      for (const auto& n : op.OutputArgumentNames()) {
        ++u.writers[n];
        u.writer[n] = {block, i};
      }
    }
  }
  return u;
}

int Count(const std::unordered_map<std::string, int>& m, const std::string& n) {
  auto it = m.find(n);
  return it == m.end() ? 0 : it->second;
}

bool HasPerm0213(const OpDesc& op) {
  return op.Type() == "transpose" && op.HasAttr("axis") &&
         op.Attr<std::vector<int>>("axis") == std::vector<int>{0, 2, 1, 3};
}

bool BoolAttr(const OpDesc& op, const char* name) { return op.HasAttr(name) && op.Attr<bool>(name); }
float FloatAttr(const OpDesc& op, const char* name, float dflt) {
  return op.HasAttr(name) ? op.Attr<float>(name) : dflt;
}

class AttentionFusion {
 public:
  AttentionFusion(ProgramDesc& program, const std::unordered_set<std::string>& keep)
      : program_(program), keep_(keep), uses_(CountUses(program)) {}

  // Tries the softmax at `i` of `block`; true when it was fused.
  bool TryAt(BlockDesc& block, size_t i) {
    const OpDesc& softmax = *block.Op(i);
    if (softmax.Type() != "softmax" || softmax.Input("X").size() != 1) return false;
    const std::string scores = softmax.Input("X")[0];
    const std::string probs = softmax.Output("Out")[0];
    // The mask and the raw scores.
    std::string mask, raw = scores;
    const OpDesc* add = nullptr;
    const OpDesc* w = Writer(block, scores);
    if (w && w->Type() == "elementwise_add") {
      add = w;
      if (!Link(block, scores)) return false;
      raw = add->Input("X")[0];
      mask = add->Input("Y")[0];
    }
    // The scores' scale: matmul's alpha, or a scale op on its result (as
    // paddle.scale writes it), or both.
    const OpDesc* scale = Writer(block, raw);
    double scaled_by = 1.0;
    std::string product = raw;
    if (scale && scale->Type() == "scale") {
      if (!Link(block, raw) || scale->Input("X").size() != 1 || scale->HasInput("ScaleTensor") ||
          FloatAttr(*scale, "bias", 0.0f) != 0.0f)
        return false;
      scaled_by = FloatAttr(*scale, "scale", 1.0f);
      product = scale->Input("X")[0];
    } else {
      scale = nullptr;
    }
    const OpDesc* qk = Writer(block, product);
    if (!qk || qk->Type() != "matmul" || !Link(block, product) || !Link(block, probs)) return false;
    if (BoolAttr(*qk, "transpose_X") || !BoolAttr(*qk, "transpose_Y")) return false;
    // p's one reader: matmul(p, vt).
    const OpDesc* pv = nullptr;
    size_t pv_at = 0;
    for (size_t j = i + 1; j < block.OpSize(); ++j) {
      const auto ins = block.Op(j)->InputArgumentNames();
      if (std::find(ins.begin(), ins.end(), probs) != ins.end()) {
        pv = block.Op(j);
        pv_at = j;
        break;
      }
    }
    if (!pv || pv->Type() != "matmul" || pv->Input("X") != std::vector<std::string>{probs}) return false;
    if (BoolAttr(*pv, "transpose_X") || BoolAttr(*pv, "transpose_Y") || FloatAttr(*pv, "alpha", 1.0f) != 1.0f)
      return false;
    // q, k, v behind their transposes, all [B, T, H, D].
    std::string qkv[3];
    const std::string* from[3] = {&qk->Input("X")[0], &qk->Input("Y")[0], &pv->Input("Y")[0]};
    Shape shapes[3];
    for (int t = 0; t < 3; ++t) {
      const OpDesc* tr = Writer(block, *from[t]);
      if (!tr || !HasPerm0213(*tr) || Count(uses_.writers, *from[t]) != 1) return false;
      qkv[t] = tr->Input("X")[0];
      // The fused op reads it where pv was: nothing may write it after the
      // transpose that read it.
      if (!UnchangedAfter(block, qkv[t], Index(block, tr))) return false;
      const VarDesc* v = block.FindVarRecursive(qkv[t]);
      if (!v || v->GetShape().size() != 4) return false;
      shapes[t] = v->GetShape();
    }
    // flash_attn's shapes: matmul broadcasts batch and heads (k and v of
    // one head, multi-query attention; or of batch 1), flash_attn does not.
    // A dim unknown here (-1) matches only an unknown one; should they
    // differ at run time, flash_attn says so rather than computing.
    const Shape &sq = shapes[0], &sk = shapes[1], &sv = shapes[2];
    if (sk[0] != sq[0] || sv[0] != sq[0] || sk[2] != sq[2] || sv[2] != sq[2] || sv[1] != sk[1] || sk[3] != sq[3])
      return false;
    const DType dtype = block.FindVarRecursive(qkv[0])->GetDType();
    if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && dtype != DType::kBFloat16) return false;
    const int64_t d = shapes[0][3];
    if (d <= 0) return false;
    const double alpha = FloatAttr(*qk, "alpha", 1.0f) * scaled_by;
    if (std::abs(alpha * std::sqrt(static_cast<double>(d)) - 1.0) > 1e-6) return false;
    // Softmax over the keys.
    if (softmax.HasAttr("axis")) {
      const int axis = softmax.Attr<int>("axis");
      if (axis != -1 && axis != 3) return false;
    }
    bool causal = false;
    if (add) {
      const int axis = add->HasAttr("axis") ? add->Attr<int>("axis") : -1;
      const VarDesc* mv = block.FindVarRecursive(mask);
      if (!mv || mv->GetShape().empty() || mv->GetShape().size() > 4) return false;
      if (axis != -1 && axis != static_cast<int>(4 - mv->GetShape().size())) return false;
      if (mv->GetDType() != dtype || NeedsGradient(block, mask, 0)) return false;
      if (!UnchangedAfter(block, mask, Index(block, add))) return false;
      int64_t strides[4];
      try {
        AttnMaskStrides(mv->GetShape(), {shapes[0][0], shapes[0][2], shapes[0][1], shapes[1][1]}, strides, "");
      } catch (const Error&) {
        return false;
      }
      causal = CausalConstant(block, mask, shapes[0][1], shapes[1][1]);
    }
    // The output: straight into the back-transpose's result when that is
    // o's only reader, else into a new var transposed into o.
    const std::string o = pv->Output("Out")[0];
    if (Count(uses_.writers, o) != 1) return false;
    const OpDesc* back = nullptr;
    size_t back_at = 0;
    if (Count(uses_.readers, o) == 1 && !keep_.count(o) && !IsPersistable(block, o)) {
      for (size_t j = pv_at + 1; j < block.OpSize(); ++j) {
        const auto ins = block.Op(j)->InputArgumentNames();
        if (std::find(ins.begin(), ins.end(), o) != ins.end()) {
          if (HasPerm0213(*block.Op(j))) {
            back = block.Op(j);
            back_at = j;
          }
          break;
        }
      }
    }
    const std::string out = back ? back->Output("Out")[0] : UniqueName(block, o + "@flash_attn_out");
    if (back && Count(uses_.writers, out) != 1) return false;
    const std::string lse = UniqueName(block, o + "@softmax_lse");
    VarNameMap ins{{"q", {qkv[0]}}, {"k", {qkv[1]}}, {"v", {qkv[2]}}};
    if (add && !causal) ins["attn_mask"] = {mask};
    auto fused = std::make_unique<OpDesc>("flash_attn", ins, VarNameMap{{"out", {out}}, {"softmax_lse", {lse}}},
                                          AttributeMap{{"causal", causal}});
    FillDefaultAttrs(*fused, *CurrentRegistry(), &program_);
    fused->SetPos(pv->Pos());
    // The new vars, typed as flash_attn's inference will type them.
    auto declare = [&](const std::string& n, Shape shape, DType t) {
      VarDesc* v = block.Var(n);
      v->SetShape(std::move(shape));
      v->SetDType(t);
      v->MarkDTypeKnown();
      v->SetDeclared(false);
    };
    declare(lse, {shapes[0][0], shapes[0][2], shapes[0][1]}, dtype == DType::kBFloat16 ? DType::kFloat32 : dtype);
    if (!back) declare(out, {shapes[0][0], shapes[0][1], shapes[0][2], shapes[2][3]}, dtype);
    std::unique_ptr<OpDesc> back_op;
    if (!back) {
      back_op = std::make_unique<OpDesc>("transpose", VarNameMap{{"X", {out}}}, VarNameMap{{"Out", {o}}},
                                         AttributeMap{{"axis", std::vector<int>{0, 2, 1, 3}}});
      FillDefaultAttrs(*back_op, *CurrentRegistry(), &program_);
      back_op->SetPos(pv->Pos());
    }

    // The matched ops go, and the transposes nothing else reads; the fused
    // op takes pv's place (every input is written before it, every reader
    // of its output comes after the back-transpose it replaces).
    std::vector<size_t> gone{Index(block, qk), i, pv_at};
    std::vector<std::string> links{raw, probs, o};
    if (scale) {
      gone.push_back(Index(block, scale));
      links.push_back(product);
    }
    if (add) {
      gone.push_back(Index(block, add));
      links.push_back(scores);
    }
    if (back) gone.push_back(back_at);
    std::unordered_map<std::string, int> matched_reads;
    for (const std::string* t : from) ++matched_reads[*t];
    for (const auto& [t, reads] : matched_reads) {
      if (Count(uses_.readers, t) > reads || keep_.count(t) || IsPersistable(block, t)) continue;
      gone.push_back(Index(block, Writer(block, t)));
      links.push_back(t);
    }
    std::sort(gone.begin(), gone.end());
    gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
    size_t place = pv_at;
    for (size_t g : gone)
      if (g < pv_at) --place;
    for (size_t k = gone.size(); k-- > 0;) block.RemoveOps(gone[k], gone[k] + 1);
    block.InsertOp(place, std::move(fused));
    if (back_op) block.InsertOp(place + 1, std::move(back_op));
    for (const auto& n : links) {
      if (!back && n == o) continue;  // the back-transpose writes it
      const VarDesc* v = block.FindVar(n);
      if (v && !v->Declared()) block.RemoveVar(n);
    }
    uses_ = CountUses(program_);
    if (causal) DropUnread(block, mask);
    return true;
  }

 private:
  // Whether ops of `block` compute `var` from constants alone, and its value,
  // evaluated once on the host (EvaluateOnHost), is the causal pattern
  // (IsCausalMask); false when they do not (a feed, a persistable var, a
  // random op, control flow, more than a few ops) or an op fails.
  bool CausalConstant(const BlockDesc& block, const std::string& var, int64_t seq_q, int64_t seq_k) const {
    constexpr size_t kMaxOps = 16;
    const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
    std::vector<size_t> ops;
    std::unordered_set<std::string> seen;
    std::vector<std::string> todo{var};
    while (!todo.empty()) {
      const std::string n = todo.back();
      todo.pop_back();
      if (n == kEmptyVarName || !seen.insert(n).second) continue;
      if (Count(uses_.writers, n) != 1 || IsPersistable(block, n)) return false;
      const OpDesc* w = Writer(block, n);
      const OpInfo* info = w ? registry->Find(w->Type()) : nullptr;
      if (!info || info->traits.random || info->traits.has_sub_block || info->traits.control_flow) return false;
      ops.push_back(Index(block, w));
      if (ops.size() > kMaxOps) return false;
      for (const auto& in : w->InputArgumentNames()) todo.push_back(in);
    }
    std::sort(ops.begin(), ops.end());
    ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
    try {
      const auto& value = EvaluateOnHost(block, ops, var);  // a copy, or (C ABI) the core's
      return IsCausalMask(value, seq_q, seq_k);
    } catch (const Error&) {
      return false;
    }
  }

  // Removes the ops that computed `var`, and then those that computed only
  // their inputs, once nothing reads what they write.
  void DropUnread(BlockDesc& block, const std::string& var) {
    std::vector<std::string> todo{var};
    while (!todo.empty()) {
      const std::string n = todo.back();
      todo.pop_back();
      const OpDesc* w = Writer(block, n);
      if (!w) continue;
      for (const auto& out : w->OutputArgumentNames())
        if (Count(uses_.readers, out) > 0 || Count(uses_.writers, out) != 1 || keep_.count(out) ||
            IsPersistable(block, out))
          return;
      const std::vector<std::string> ins = w->InputArgumentNames();
      const std::vector<std::string> outs = w->OutputArgumentNames();
      const size_t at = Index(block, w);
      block.RemoveOps(at, at + 1);
      for (const auto& out : outs) {
        const VarDesc* v = block.FindVar(out);
        if (v && !v->Declared()) block.RemoveVar(out);
      }
      uses_ = CountUses(program_);
      todo.insert(todo.end(), ins.begin(), ins.end());
    }
  }

  const OpDesc* Writer(const BlockDesc& block, const std::string& var) const {
    auto it = uses_.writer.find(var);
    if (it == uses_.writer.end() || it->second.first != &block) return nullptr;
    return it->second.first->Op(it->second.second);
  }

  static size_t Index(const BlockDesc& block, const OpDesc* op) {
    for (size_t i = 0; i < block.OpSize(); ++i)
      if (block.Op(i) == op) return i;
    return block.OpSize();
  }

  static bool IsPersistable(const BlockDesc& block, const std::string& var) {
    const VarDesc* v = block.FindVarRecursive(var);
    return v && v->Persistable();
  }

  // A link of the chain: written once, read once, not kept, not persistable.
  bool Link(const BlockDesc& block, const std::string& var) const {
    return Count(uses_.writers, var) == 1 && Count(uses_.readers, var) == 1 && !keep_.count(var) &&
           !IsPersistable(block, var);
  }

  // Whether `var`, read by the op at `reader`, keeps its value until the
  // fused op (at pv's place, after `reader`): written by no op, or by one op
  // of this block before `reader`.
  bool UnchangedAfter(const BlockDesc& block, const std::string& var, size_t reader) const {
    const int writers = Count(uses_.writers, var);
    if (writers == 0) return true;
    if (writers > 1) return false;
    const auto it = uses_.writer.find(var);
    return it != uses_.writer.end() && it->second.first == &block && it->second.second < reader;
  }

  // Whether a gradient would reach `var`: a trainable parameter, a fed var
  // that does not stop gradients (the backward part computes its gradient:
  // `mask@GRAD` can be fetched), or computed from one of them.
  bool NeedsGradient(const BlockDesc& block, const std::string& var, int depth) const {
    const VarDesc* v = block.FindVarRecursive(var);
    if (v && v->StopGradient()) return false;
    if (v && v->Persistable()) return true;
    if (depth > 64) return true;  // too deep to tell: assume so
    const OpDesc* w = Writer(block, var);
    if (!w) return v && (!v->HasDType() || IsFloating(v->GetDType()));  // fed (or the parent block's)
    for (const auto& in : w->InputArgumentNames())
      if (NeedsGradient(block, in, depth + 1)) return true;
    return false;
  }

  static std::string UniqueName(const BlockDesc& block, const std::string& base) {
    std::string n = base;
    for (int k = 1; block.HasVarRecursive(n); ++k) n = base + "_" + std::to_string(k);
    return n;
  }

  ProgramDesc& program_;
  const std::unordered_set<std::string>& keep_;
  Uses uses_;
};

}  // namespace

size_t FuseAttention(ProgramDesc& program, const std::unordered_set<std::string>& keep) {
  AttentionFusion f(program, keep);
  size_t fused = 0;
  for (size_t b = 0; b < program.Size(); ++b) {
    BlockDesc& block = *program.Block(b);
    for (size_t i = 0; i < block.OpSize(); ++i) {
      if (block.Op(i)->Type() != "softmax") continue;
      if (f.TryAt(block, i)) {
        ++fused;
        i = 0;  // indices moved: look again from the start
      }
    }
  }
  return fused;
}

}  // namespace nabla::nn
