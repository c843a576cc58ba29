// FuseGradOps's rewrites for mul_grad and matmul_grad (gemm_grad_passes.h).
#include "gemm_grad_passes.h"

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

namespace nabla::math_ops {
namespace {

// A 2-D float32 product without transposes or scaling, where mul_grad and
// matmul_grad compute X@GRAD = Out@GRAD * Y^T and Y@GRAD = X^T * Out@GRAD.
bool PlainFloat32Product(const OpDesc& op, const BlockDesc& block) {
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
  for (const char* slot : {"X", "Y"}) {
    if (op.Input(slot).size() != 1) return false;
    const VarDesc* v = block.FindVarRecursive(op.Input(slot)[0]);
    if (!v || v->GetShape().size() != 2 || v->GetDType() != DType::kFloat32) return false;
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
  return PlainFloat32Product(op, block);
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

// After the backward part (FuseGradOps): a weight read by k products gets k
// partial gradients, which the backward builder renames and a sum adds: k
// buffers of the weight's size written and read once more (the RNN's 31
// steps: 2 MB for wh, 4 % of its step). Instead the first grad op writes
// the gradient and each later one adds its product to it in place
// (AccumulateY, a GEMM with beta 1): no buffer per step and no sum. Each
// part must come from the Y@GRAD of a grad op of the same float32 Y, be
// read by the sum alone and not be kept, and nothing between the first of
// those grad ops and the sum may read or write the gradient.
size_t ChainWeightGradients(ProgramDesc& program, const std::unordered_set<std::string>& keep,
                            const std::string& grad_type) {
  BlockDesc& block = *program.Root();
  auto registry = CurrentRegistry();
  // Over every block (sub-blocks read outer vars), counted again after each
  // rewrite: a chained gradient gains writers.
  std::unordered_map<std::string, int> readers, writers;
  auto count = [&] {
    readers.clear();
    writers.clear();
    for (size_t b = 0; b < program.Size(); ++b)
      for (const auto& op : program.Block(b)->AllOps()) {
        for (const auto& n : op->InputArgumentNames()) ++readers[n];
        for (const auto& n : op->OutputArgumentNames()) ++writers[n];
      }
  };
  count();
  auto is_float32 = [&](const std::string& name) {
    const VarDesc* v = block.FindVarRecursive(name);
    return v && !v->Persistable() && v->GetDType() == DType::kFloat32;
  };
  auto touches = [](const OpDesc& op, const std::string& name) {
    for (const auto& names : {op.InputArgumentNames(), op.OutputArgumentNames()})
      if (std::find(names.begin(), names.end(), name) != names.end()) return true;
    return false;
  };
  size_t changed = 0;
  for (size_t s = 0; s < block.OpSize(); ++s) {
    const OpDesc& sum = *block.Op(s);
    if (sum.Type() != "sum" || sum.Output("Out").size() != 1 || sum.Input("X").size() < 2) continue;
    const std::string grad = sum.Output("Out")[0];
    if (writers[grad] != 1 || !is_float32(grad)) continue;
    std::vector<size_t> at;  // the grad op writing each part
    std::string y;
    for (const std::string& part : sum.Input("X")) {
      if (part == kEmptyVarName || keep.count(part) || readers[part] != 1 || writers[part] != 1 || !is_float32(part))
        break;
      size_t w = 0;
      while (w < s && !touches(*block.Op(w), part)) ++w;
      if (w == s) break;
      const OpDesc& op = *block.Op(w);
      // Float32 operands: the kernel that accumulates (a bf16 grad op also
      // writes float32 parts, with force_fp32_output).
      if (op.Type() != grad_type || !op.HasOutput("Y@GRAD") || op.Output("Y@GRAD") != std::vector<std::string>{part} ||
          op.HasInput(kAccumulateY) || op.Input("Y").size() != 1 || op.Input("X").size() != 1 ||
          (!y.empty() && op.Input("Y")[0] != y) || !PlainFloat32Product(op, block))
        break;
      y = op.Input("Y")[0];
      at.push_back(w);
    }
    if (at.size() != sum.Input("X").size()) continue;
    std::sort(at.begin(), at.end());
    // Nothing between the first link and the sum touches the gradient, nor
    // owns a block (whose body could read it by name).
    bool clear = std::adjacent_find(at.begin(), at.end()) == at.end();
    for (size_t i = at.front(); i < s && clear; ++i) {
      const OpInfo* info = registry->Find(block.Op(i)->Type());
      clear = info && !info->traits.has_sub_block && !touches(*block.Op(i), grad);
    }
    if (!clear) continue;
    const std::vector<std::string> parts = sum.Input("X");
    for (size_t i = 0; i < at.size(); ++i) {
      OpDesc& op = *block.Op(at[i]);
      op.SetOutput("Y@GRAD", {grad});
      if (i > 0) op.SetInput(kAccumulateY, {grad});
    }
    block.RemoveOps(s, s + 1);
    for (const auto& part : parts) {
      const VarDesc* v = block.FindVar(part);
      if (v && !v->Declared()) block.RemoveVar(part);
    }
    ++changed;
    --s;
    count();
  }
  return changed;
}

}  // namespace

void RefuseAccumulate(const ExecutionContext& ctx, const char* kernel) {
  NABLA_ENFORCE(!ctx.HasInput(kAccumulateY), kUnimplemented, "the ", kernel, " kernel has no ", kAccumulateY,
                " (FuseGradOps adds it to float32 cpu programs only)");
}

ProgramPass ShareTransposedWeightsPass(const std::string& grad_type) {
  return ProgramPass{"share_transposed_weights",
                     [grad_type](ProgramDesc& program, const std::unordered_set<std::string>&) {
                       return ShareTransposedWeights(program, grad_type);
                     }};
}

ProgramPass ChainWeightGradientsPass(const std::string& grad_type) {
  return ProgramPass{"chain_weight_gradients",
                     [grad_type](ProgramDesc& program, const std::unordered_set<std::string>& keep) {
                       return ChainWeightGradients(program, keep, grad_type);
                     }};
}

}  // namespace nabla::math_ops
