// FuseGradOps's rewrites for mul_grad and matmul_grad (gemm_grad_passes.h).
#include "gemm_grad_passes.h"

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "nabla/opkit/program_uses.h"

namespace nabla::math_ops {
namespace {

// A 2-D product without transposes or scaling, where mul_grad and
// matmul_grad compute X@GRAD = Out@GRAD * Y^T and Y@GRAD = X^T * Out@GRAD,
// of float32 operands, or with `or_bf16` of bfloat16 ones whose gradients
// are written in float32 (force_fp32_output, the bf16 fold's).
bool PlainProduct(const OpDesc& op, const BlockDesc& block, bool or_bf16 = false) {
  auto attr_is = [&](const char* name, auto value) {
    return !op.HasAttr(name) || op.Attr<decltype(value)>(name) == value;
  };
  if (op.Type() == "mul_grad") {
    if (!attr_is("x_num_col_dims", 1) || !attr_is("y_num_col_dims", 1)) return false;
  } else if (op.Type() == "matmul_grad") {
    if (!attr_is("transpose_X", false) || !attr_is("transpose_Y", false) || !attr_is("alpha", 1.0f)) return false;
  } else {
    return false;
  }
  const bool fp32_grads = op.HasAttr(kForceFp32OutputAttr) && op.Attr<bool>(kForceFp32OutputAttr);
  for (const char* slot : {"X", "Y"}) {
    if (op.Input(slot).size() != 1) return false;
    const VarDesc* v = block.FindVarRecursive(op.Input(slot)[0]);
    if (!v || v->GetShape().size() != 2) return false;
    if (v->GetDType() != DType::kFloat32 && !(or_bf16 && fp32_grads && v->GetDType() == DType::kBFloat16)) return false;
  }
  return true;
}

// After the backward part (FuseGradOps): the grad op's X@GRAD = Out@GRAD * Y^T
// is a product with B transposed, which OpenBLAS's small-matrix kernels run
// at two thirds of a plain product's rate (bench/gemm_bench, 32x128x128: 74
// against 113 GFLOP/s). Where several grad ops read the same Y (one
// weight applied at every step of an unrolled RNN) and nothing writes Y
// between them, one transpose computes Y^T before the first and each X@GRAD
// becomes a plain mul of Out@GRAD and Y^T; the grad op keeps Y@GRAD. Float32
// 2-D operands only (the bf16 kernels are oneDNN's, which transposes as
// fast); loop bodies are left alone, as is a range holding an op with a
// block (it could write Y).
bool TakesSharedTranspose(const OpDesc& op, const std::string& grad_type, const BlockDesc& block) {
  if (op.Type() != grad_type || !op.HasOutput("X@GRAD") || op.Output("X@GRAD").size() != 1 ||
      op.Output("X@GRAD")[0] == kEmptyVarName || op.Input("X").size() != 1 || op.Input("Y").size() != 1 ||
      op.Input("Out@GRAD").size() != 1)
    return false;
  return PlainProduct(op, block);
}

size_t ShareTransposedWeights(ProgramDesc& program, const std::string& grad_type) {
  auto registry = CurrentRegistry();
  BlockDesc& block = *program.Root();
  std::map<std::string, std::vector<const OpDesc*>> by_weight;  // Y -> its grad ops, in program order
  for (const auto& op : block.AllOps())
    if (TakesSharedTranspose(*op, grad_type, block)) by_weight[op->Input("Y")[0]].push_back(op.get());
  size_t changed = 0;
  for (auto& [y, users] : by_weight) {
    if (users.size() < 2) continue;
    auto index_of = [&](const OpDesc* op) {
      for (size_t i = 0; i < block.OpSize(); ++i)
        if (block.Op(i) == op) return i;
      return block.OpSize();
    };
    const size_t first = index_of(users.front()), last = index_of(users.back());
    bool y_stays = true;
    for (size_t i = first; i <= last && y_stays; ++i) {
      const OpDesc& op = *block.Op(i);
      const OpInfo* info = registry->Find(op.Type());
      const std::vector<std::string> outs = op.OutputArgumentNames();
      y_stays = info && !info->traits.has_sub_block && std::find(outs.begin(), outs.end(), y) == outs.end();
    }
    if (!y_stays) continue;
    std::string yt = y + "@TRANSPOSE";
    for (int n = 1; block.HasVarRecursive(yt); ++n) yt = StrCat(y, "@TRANSPOSE@", n);
    const VarDesc& yv = *block.FindVarRecursive(y);
    VarDesc* ytv = block.Var(yt);
    ytv->SetDType(DType::kFloat32);
    ytv->MarkDTypeKnown();
    ytv->SetShape({yv.GetShape()[1], yv.GetShape()[0]});
    auto transpose = std::make_unique<OpDesc>("transpose", VarNameMap{{"X", {y}}}, VarNameMap{{"Out", {yt}}},
                                              AttributeMap{{"axis", std::vector<int>{1, 0}}});
    transpose->SetPos(users.front()->Pos());
    block.InsertOp(first, std::move(transpose));
    for (const OpDesc* user : users) {
      const size_t at = index_of(user);
      OpDesc& grad = *block.Op(at);
      auto dx = std::make_unique<OpDesc>("mul", VarNameMap{{"X", grad.Input("Out@GRAD")}, {"Y", {yt}}},
                                         VarNameMap{{"Out", grad.Output("X@GRAD")}},
                                         AttributeMap{{"x_num_col_dims", 1}, {"y_num_col_dims", 1}});
      dx->SetPos(grad.Pos());
      const bool keeps_dy =
          grad.HasOutput("Y@GRAD") && !grad.Output("Y@GRAD").empty() && grad.Output("Y@GRAD")[0] != kEmptyVarName;
      if (keeps_dy) {
        grad.MutableOutputs().erase("X@GRAD");
        block.InsertOp(at + 1, std::move(dx));
      } else {
        block.RemoveOps(at, at + 1);
        block.InsertOp(at, std::move(dx));
      }
    }
    ++changed;
  }
  return changed;
}

// After the backward part (FuseGradOps): a var read by k products gets k
// partial gradients, which the backward builder renames and a sum adds: k
// buffers of the var's size written and read once more. Instead the first
// grad op writes the gradient and each later one adds its product to it in
// place (a GEMM with beta 1): no buffer per part and no sum.
//  - Y (AccumulateY): a weight applied at every step of an unrolled RNN
//    (its 31 steps: 2 MB for wh, 4 % of its step). Float32 2-D products.
//  - X (AccumulateX, mul_grad only): an input several layers read, as the
//    GPT block's q, k and v projections read ln1 (B=8, T=256: that 3-way
//    sum 0.5 ms). X of any rank: its gradient is the product's C; float32,
//    or bfloat16 with float32 gradients.
// Each part must come from the grad slot of a grad op (for Y, of the same
// weight; for X, of any input: the bf16 pass gives each reader of a var its
// own cast of it), be read by the sum alone and not be kept, and nothing
// between the first of those grad ops and the sum may read or write the
// gradient.
struct ChainSlot {
  bool input;              // X's gradient, not Y's
  const char* operand;     // "X" or "Y"
  const char* grad;        // its gradient's output slot
  const char* accumulate;  // the grad op's partial-gradient input
};
constexpr ChainSlot kChainY{false, "Y", "Y@GRAD", kAccumulateY};
constexpr ChainSlot kChainX{true, "X", "X@GRAD", kAccumulateX};

// The grad op's operands qualify for chaining `slot`'s gradient.
bool ChainsSlot(const OpDesc& op, const BlockDesc& block, const ChainSlot& slot) {
  if (!slot.input) return PlainProduct(op, block);
  if (op.Type() != "mul_grad") return false;
  // Float32 operands, or bfloat16 ones whose gradients are written in
  // float32 (force_fp32_output, the bf16 fold's).
  const bool fp32_grads = op.HasAttr(kForceFp32OutputAttr) && op.Attr<bool>(kForceFp32OutputAttr);
  for (const char* in : {"X", "Y", "Out@GRAD"}) {
    if (op.Input(in).size() != 1) return false;
    const VarDesc* v = block.FindVarRecursive(op.Input(in)[0]);
    if (!v || (v->GetDType() != DType::kFloat32 && !(fp32_grads && v->GetDType() == DType::kBFloat16))) return false;
  }
  return true;
}

size_t ChainGradients(ProgramDesc& program, const std::unordered_set<std::string>& keep, const std::string& grad_type,
                      const ChainSlot& slot) {
  BlockDesc& block = *program.Root();
  auto registry = CurrentRegistry();
  // Counted again after each rewrite: a chained gradient gains writers.
  std::unordered_map<std::string, int> readers, writers;
  CountUses(program, readers, writers);
  auto is_float32 = [&](const std::string& name) {
    const VarDesc* v = block.FindVarRecursive(name);
    return v && !v->Persistable() && v->GetDType() == DType::kFloat32;
  };
  size_t changed = 0;
  for (size_t s = 0; s < block.OpSize(); ++s) {
    const OpDesc& sum = *block.Op(s);
    if (sum.Type() != "sum" || sum.Output("Out").size() != 1 || sum.Input("X").size() < 2) continue;
    const std::string grad = sum.Output("Out")[0];
    if (writers[grad] != 1 || !is_float32(grad)) continue;
    std::vector<size_t> at;  // the grad op writing each part
    std::string operand;
    for (const std::string& part : sum.Input("X")) {
      if (part == kEmptyVarName || keep.count(part) || readers[part] != 1 || writers[part] != 1 || !is_float32(part))
        break;
      size_t w = 0;
      while (w < s && !Touches(*block.Op(w), part)) ++w;
      if (w == s) break;
      const OpDesc& op = *block.Op(w);
      // Float32 operands: the kernel that accumulates (a bf16 grad op also
      // writes float32 Y parts, with force_fp32_output).
      if (op.Type() != grad_type || !op.HasOutput(slot.grad) ||
          op.Output(slot.grad) != std::vector<std::string>{part} || op.HasInput(slot.accumulate) ||
          op.Input("Y").size() != 1 || op.Input("X").size() != 1 ||
          (!slot.input && !operand.empty() && op.Input(slot.operand)[0] != operand) || !ChainsSlot(op, block, slot))
        break;
      // The gradient is written in place while the op runs: it must not be
      // one of the op's operands, and has the operand's shape.
      const auto ins = op.InputArgumentNames();
      if (std::find(ins.begin(), ins.end(), grad) != ins.end()) break;
      const VarDesc* ov = block.FindVarRecursive(op.Input(slot.operand)[0]);
      if (!ov || ov->GetShape() != block.FindVarRecursive(grad)->GetShape()) break;
      operand = op.Input(slot.operand)[0];
      at.push_back(w);
    }
    if (at.size() != sum.Input("X").size()) continue;
    std::sort(at.begin(), at.end());
    // Nothing between the first link and the sum touches the gradient, nor
    // owns a block (whose body could read it by name).
    bool clear = std::adjacent_find(at.begin(), at.end()) == at.end();
    for (size_t i = at.front(); i < s && clear; ++i) {
      const OpInfo* info = registry->Find(block.Op(i)->Type());
      clear = info && !info->traits.has_sub_block && !Touches(*block.Op(i), grad);
    }
    if (!clear) continue;
    const std::vector<std::string> parts = sum.Input("X");
    for (size_t i = 0; i < at.size(); ++i) {
      OpDesc& op = *block.Op(at[i]);
      op.SetOutput(slot.grad, {grad});
      if (i > 0) op.SetInput(slot.accumulate, {grad});
    }
    block.RemoveOps(s, s + 1);
    for (const auto& part : parts) {
      const VarDesc* v = block.FindVar(part);
      if (v && !v->Declared()) block.RemoveVar(part);
    }
    ++changed;
    --s;
    CountUses(program, readers, writers);
  }
  return changed;
}

// After the backward part and the optimizer (FuseGradOps): sgd reads a
// weight's gradient, which a GEMM has just written, and the weight, and
// writes the weight: three passes over weight-sized memory after the
// GEMM's one, 5-8 % of the MLP's float32 step and 10 % of its bf16 step.
// Where the gradient is one grad op's Y@GRAD and read by the sgd alone,
// that grad op applies the step itself (AccumulateY and LearningRate: a
// GEMM with beta 1 scaled by -LearningRate into the weight) and the sgd op
// and the gradient var go. The gradient must not be kept; nothing between
// the grad op and the sgd may touch the weight, write the learning rate or
// own a block; the grad op must not read the weight as X or Out@GRAD. The
// GEMM may round the step differently from sgd (by an ulp, where its
// kernel fuses -lr into the accumulation); bf16 grad ops qualify when they
// write float32 gradients.
size_t ApplySgdInWeightGradients(ProgramDesc& program, const std::unordered_set<std::string>& keep,
                                 const std::string& grad_type) {
  BlockDesc& block = *program.Root();
  auto registry = CurrentRegistry();
  std::unordered_map<std::string, int> readers, writers;
  CountUses(program, readers, writers);
  auto var = [&](const std::string& name, DType dtype) -> const VarDesc* {
    const VarDesc* v = block.FindVarRecursive(name);
    return v && v->GetDType() == dtype ? v : nullptr;
  };
  auto one = [](const std::vector<std::string>& names) { return names.size() == 1 && names[0] != kEmptyVarName; };
  size_t changed = 0;
  for (size_t s = 0; s < block.OpSize(); ++s) {
    const OpDesc& sgd = *block.Op(s);
    if (sgd.Type() != "sgd" || !one(sgd.Input("Param")) || !one(sgd.Input("Grad")) || !one(sgd.Input("LearningRate")) ||
        sgd.Output("ParamOut") != sgd.Input("Param"))
      continue;
    const std::string param = sgd.Input("Param")[0], grad = sgd.Input("Grad")[0], lr = sgd.Input("LearningRate")[0];
    const VarDesc* pv = var(param, DType::kFloat32);
    const VarDesc* gv = var(grad, DType::kFloat32);
    const VarDesc* lv = var(lr, DType::kFloat32);
    if (!pv || !gv || !lv || gv->Persistable() || keep.count(grad) || readers[grad] != 1 || writers[grad] != 1 ||
        lv->GetShape() != Shape{1})
      continue;
    size_t w = s;
    while (w > 0 && !Touches(*block.Op(w - 1), grad)) --w;
    if (w-- == 0) continue;
    const OpDesc& op = *block.Op(w);
    if (op.Type() != grad_type || op.Output("Y@GRAD") != std::vector<std::string>{grad} || op.HasInput(kAccumulateY) ||
        op.HasInput(kSgdLearningRate) || !one(op.Input("Out@GRAD")) || !one(op.Input("X")) ||
        op.Input("X")[0] == param || op.Input("Out@GRAD")[0] == param || !PlainProduct(op, block, /*or_bf16=*/true))
      continue;
    const VarDesc* yv = block.FindVarRecursive(op.Input("Y")[0]);
    const Shape& shape = pv->GetShape();
    if (yv->GetShape() != shape || std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) continue;
    const std::vector<std::string> dx = op.HasOutput("X@GRAD") ? op.Output("X@GRAD") : std::vector<std::string>{};
    if (std::find(dx.begin(), dx.end(), param) != dx.end()) continue;
    bool clear = true;
    for (size_t i = w + 1; i < s && clear; ++i) {
      const OpDesc& between = *block.Op(i);
      const OpInfo* info = registry->Find(between.Type());
      const auto outs = between.OutputArgumentNames();
      clear = info && !info->traits.has_sub_block && !Touches(between, param) &&
              std::find(outs.begin(), outs.end(), lr) == outs.end();
    }
    if (!clear) continue;
    OpDesc& target = *block.Op(w);
    target.SetInput(kAccumulateY, {param});
    target.SetInput(kSgdLearningRate, {lr});
    target.SetOutput("Y@GRAD", {param});
    block.RemoveOps(s, s + 1);
    const VarDesc* g = block.FindVar(grad);
    if (g && !g->Declared()) block.RemoveVar(grad);
    ++changed;
    --s;
    CountUses(program, readers, writers);
  }
  return changed;
}

}  // namespace

void RefuseAccumulate(const ExecutionContext& ctx, const char* kernel) {
  for (const char* slot : {kAccumulateX, kAccumulateY})
    NABLA_ENFORCE(!ctx.HasInput(slot), kUnimplemented, "the ", kernel, " kernel has no ", slot,
                  " (FuseGradOps adds it to cpu programs with float32 gradients only)");
}

double YGradScale(const ExecutionContext& ctx) {
  if (!ctx.HasInput(kSgdLearningRate)) return 1.0;
  return -opkit::ReadScalar(ctx.Input(kSgdLearningRate), ctx.Op().Type(), kSgdLearningRate);
}

ProgramPass ShareTransposedWeightsPass(const std::string& grad_type) {
  return ProgramPass{"share_transposed_weights",
                     [grad_type](ProgramDesc& program, const std::unordered_set<std::string>&) {
                       return ShareTransposedWeights(program, grad_type);
                     }};
}

ProgramPass ApplySgdInWeightGradientsPass(const std::string& grad_type) {
  return ProgramPass{"apply_sgd_in_weight_gradients",
                     [grad_type](ProgramDesc& program, const std::unordered_set<std::string>& keep) {
                       return ApplySgdInWeightGradients(program, keep, grad_type);
                     }};
}

ProgramPass ChainWeightGradientsPass(const std::string& grad_type) {
  return ProgramPass{"chain_weight_gradients",
                     [grad_type](ProgramDesc& program, const std::unordered_set<std::string>& keep) {
                       return ChainGradients(program, keep, grad_type, kChainY);
                     }};
}

ProgramPass ChainInputGradientsPass() {
  return ProgramPass{"chain_input_gradients", [](ProgramDesc& program, const std::unordered_set<std::string>& keep) {
                       return ChainGradients(program, keep, "mul_grad", kChainX);
                     }};
}

}  // namespace nabla::math_ops
