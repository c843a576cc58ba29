// mul: a matrix product of X and Y, each flattened to 2-D first (Paddle's
// `mul`, the op behind fully connected layers).
#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

#include "gemm_shapes.h"
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// mul_grad's optional input: a partial Y@GRAD its product adds to.
constexpr const char* kAccumulateY = "AccumulateY";

void CheckNumColDims(const Shape& s, int num_col_dims, const char* attr, const char* slot, const std::string& where) {
  int rank = static_cast<int>(s.size());
  NABLA_ENFORCE(num_col_dims >= 1 && num_col_dims < rank, kInvalidArgument, where, ": attribute ", attr,
                " must be in [1, rank(", slot, ") - 1] = [1, ", rank - 1, "] for ", slot, " of shape ",
                ShapeToString(s), ", but received ", num_col_dims);
}

void InferMulShape(InferShapeContext& c) {
  Shape x = c.InputShape("X"), y = c.InputShape("Y");
  int xn = c.Attr<int>("x_num_col_dims"), yn = c.Attr<int>("y_num_col_dims");
  CheckNumColDims(x, xn, "x_num_col_dims", "X", c.Where());
  CheckNumColDims(y, yn, "y_num_col_dims", "Y", c.Where());
  Flat2D fx = Flatten(x, xn), fy = Flatten(y, yn);
  NABLA_ENFORCE(fx.cols < 0 || fy.rows < 0 || fx.cols == fy.rows, kInvalidArgument, c.Where(),
                ": X flattened by x_num_col_dims=", xn, " is [", fx.rows, ", ", fx.cols, "] (shape ", ShapeToString(x),
                "), so Y flattened by y_num_col_dims=", yn, " must have ", fx.cols, " rows, but received [", fy.rows,
                ", ", fy.cols, "] (shape ", ShapeToString(y), ")");
  Shape out(x.begin(), x.begin() + xn);
  out.insert(out.end(), y.begin() + yn, y.end());
  c.SetOutputShape("Out", out);
  c.SetOutputDType("Out", c.InputDType("X"));
}

template <typename T>
struct MulKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
    Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
    T* out = AllocOutput<T>(ctx, ctx.Output("Out"));
    cpu::Gemm(false, false, fx.rows, fy.cols, fx.cols, T(1), x.Data<T>(), fx.cols, y.Data<T>(), fy.cols, T(0), out,
              fy.cols);
  }
};

// X@GRAD = Out@GRAD * Y^T and Y@GRAD = X^T * Out@GRAD, on the 2-D views.
template <typename T>
struct MulGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const T* dout = ctx.Input("Out@GRAD").Data<T>();
    Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
    Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
    int64_t m = fx.rows, k = fx.cols, n = fy.cols;
    if (Tensor* dx = ctx.Output("X@GRAD"))
      cpu::Gemm(false, true, m, k, n, T(1), dout, n, y.Data<T>(), n, T(0), AllocOutput<T>(ctx, dx, x.GetShape()), k);
    if (Tensor* dy = ctx.Output("Y@GRAD")) {
      if (!ctx.HasInput(kAccumulateY)) {
        cpu::Gemm(true, false, k, n, m, T(1), x.Data<T>(), k, dout, n, T(0), AllocOutput<T>(ctx, dy, y.GetShape()), n);
        return;
      }
      // Y@GRAD = AccumulateY + X^T * Out@GRAD, in place where they are one
      // var (FuseGradOps's chain); read before the output is allocated,
      // which keeps the buffer unless another tensor shares it.
      const Tensor& acc = ctx.Input(kAccumulateY);
      NABLA_ENFORCE(acc.GetShape() == y.GetShape(), kInvalidArgument, "op 'mul_grad': ", kAccumulateY, " has shape ",
                    ShapeToString(acc.GetShape()), " but Y has ", ShapeToString(y.GetShape()));
      const T* partial = acc.Data<T>();
      T* d = AllocOutput<T>(ctx, dy, y.GetShape());
      if (d != partial) std::copy(partial, partial + acc.Numel(), d);
      cpu::Gemm(true, false, k, n, m, T(1), x.Data<T>(), k, dout, n, T(1), d, n);
    }
  }
};

// Refused by the kernels that do not accumulate (bf16, opencl), so a
// program naming it never drops the partial sum silently.
void RefuseAccumulate(const ExecutionContext& ctx, const char* kernel) {
  NABLA_ENFORCE(!ctx.HasInput(kAccumulateY), kUnimplemented, "op 'mul_grad': the ", kernel, " kernel has no ",
                kAccumulateY, " (FuseGradOps adds it for float32 cpu programs only)");
}

// bfloat16 (mixed precision, nabla/mixed_precision.h): bfloat16 operands,
// float32 accumulation on oneDNN, results rounded to bfloat16 as PyTorch's
// autocast does; mul_grad's with force_fp32_output written in float32 as
// they are. C = op(A) * op(B) into `out`, allocated with `shape` in the
// op's output dtype.
void GemmBf16Into(const ExecutionContext& ctx, Tensor* out, Shape shape, bool ta, bool tb, int64_t m, int64_t n,
                  int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb) {
  if (ForcesFp32Output(ctx))
    cpu::GemmBf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, AllocOutput<float>(ctx, out, std::move(shape)), n);
  else
    cpu::GemmBf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, AllocOutput<bfloat16>(ctx, out, std::move(shape)), n);
}

void MulBf16Kernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
  Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
  bfloat16* out = AllocOutput<bfloat16>(ctx, ctx.Output("Out"));
  cpu::GemmBf16(false, false, fx.rows, fy.cols, fx.cols, 1.0f, x.Data<bfloat16>(), fx.cols, y.Data<bfloat16>(), fy.cols,
                out, fy.cols);
}

void MulGradBf16Kernel(const ExecutionContext& ctx) {
  RefuseAccumulate(ctx, "bfloat16");
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const bfloat16* dout = ctx.Input("Out@GRAD").Data<bfloat16>();
  Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
  Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
  int64_t m = fx.rows, k = fx.cols, n = fy.cols;
  if (Tensor* dx = ctx.Output("X@GRAD"))
    GemmBf16Into(ctx, dx, x.GetShape(), false, true, m, k, n, dout, n, y.Data<bfloat16>(), n);
  if (Tensor* dy = ctx.Output("Y@GRAD"))
    GemmBf16Into(ctx, dy, y.GetShape(), true, false, k, n, m, x.Data<bfloat16>(), k, dout, n);
}

// After the backward part (FuseGradOps): mul_grad's X@GRAD = Out@GRAD * Y^T
// is a product with B transposed, which OpenBLAS's small-matrix kernels run
// at two thirds of a plain product's rate (bench/gemm_bench, 32x128x128: 74
// against 113 GFLOP/s). Where several mul_grad ops read the same Y (one
// weight applied at every step of an unrolled RNN) and nothing writes Y
// between them, one transpose computes Y^T before the first and each X@GRAD
// becomes a plain mul of Out@GRAD and Y^T; mul_grad keeps Y@GRAD. Float32
// 2-D operands only (the bf16 kernels are oneDNN's, which transposes as
// fast); loop bodies are left alone, as is a range holding an op with a
// block (it could write Y).
bool TakesSharedTranspose(const OpDesc& op, const BlockDesc& block) {
  if (op.Type() != "mul_grad" || !op.HasOutput("X@GRAD") || op.Output("X@GRAD").size() != 1 ||
      op.Output("X@GRAD")[0] == kEmptyVarName || op.Input("X").size() != 1 || op.Input("Y").size() != 1 ||
      op.Input("Out@GRAD").size() != 1)
    return false;
  if (op.Attr<int>("x_num_col_dims") != 1 || op.Attr<int>("y_num_col_dims") != 1) return false;
  for (const char* slot : {"X", "Y"}) {
    const VarDesc* v = block.FindVarRecursive(op.Input(slot)[0]);
    if (!v || v->GetShape().size() != 2 || v->GetDType() != DType::kFloat32) return false;
  }
  return true;
}

size_t ShareTransposedWeights(ProgramDesc& program, const std::unordered_set<std::string>& /*keep*/) {
  auto registry = CurrentRegistry();
  BlockDesc& block = *program.Root();
  std::map<std::string, std::vector<const OpDesc*>> by_weight;  // Y -> its mul_grad ops, in program order
  for (const auto& op : block.AllOps())
    if (TakesSharedTranspose(*op, block)) by_weight[op->Input("Y")[0]].push_back(op.get());
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

// After the backward part (FuseGradOps): a weight read by k mul ops gets k
// partial gradients, which the backward builder renames and a sum adds: k
// buffers of the weight's size written and read once more (the RNN's 31
// steps: 2 MB for wh, 4 % of its step). Instead the first mul_grad writes
// the gradient and each later one adds its product to it in place
// (AccumulateY, a GEMM with beta 1): no buffer per step and no sum. Each
// part must come from the Y@GRAD of a mul_grad of the same float32 Y, be
// read by the sum alone and not be kept, and nothing between the first of
// those mul_grads and the sum may read or write the gradient.
size_t ChainSharedWeightGradients(ProgramDesc& program, const std::unordered_set<std::string>& keep) {
  BlockDesc& block = *program.Root();
  std::unordered_map<std::string, int> readers, writers;  // over every block: sub-blocks read outer vars
  for (size_t b = 0; b < program.Size(); ++b)
    for (const auto& op : program.Block(b)->AllOps()) {
      for (const auto& n : op->InputArgumentNames()) ++readers[n];
      for (const auto& n : op->OutputArgumentNames()) ++writers[n];
    }
  auto is_float32 = [&](const std::string& name, bool persistable_ok = false) {
    const VarDesc* v = block.FindVarRecursive(name);
    return v && (persistable_ok || !v->Persistable()) && v->GetDType() == DType::kFloat32;
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
    std::vector<size_t> at;  // the mul_grad writing each part
    std::string y;
    for (const std::string& part : sum.Input("X")) {
      if (part == kEmptyVarName || keep.count(part) || readers[part] != 1 || writers[part] != 1 || !is_float32(part))
        break;
      size_t w = 0;
      while (w < s && !touches(*block.Op(w), part)) ++w;
      if (w == s) break;
      const OpDesc& op = *block.Op(w);
      // Float32 operands: the kernel that accumulates (a bf16 mul_grad
      // also writes float32 parts, with force_fp32_output).
      if (op.Type() != "mul_grad" || !op.HasOutput("Y@GRAD") || op.Output("Y@GRAD") != std::vector<std::string>{part} ||
          op.HasInput(kAccumulateY) || op.Input("Y").size() != 1 || op.Input("X").size() != 1 ||
          (!y.empty() && op.Input("Y")[0] != y) || !is_float32(op.Input("Y")[0], true) ||
          !is_float32(op.Input("X")[0], true))
        break;
      y = op.Input("Y")[0];
      at.push_back(w);
    }
    if (at.size() != sum.Input("X").size()) continue;
    std::sort(at.begin(), at.end());
    bool clear = std::adjacent_find(at.begin(), at.end()) == at.end();
    for (size_t i = at.front(); i < s && clear; ++i) clear = !touches(*block.Op(i), grad);
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
  }
  return changed;
}

NABLA_REGISTER_OPS(mul) {
  registrar.Op("mul", __FILE__, __LINE__)
      .Doc(
          "Out = X * Y, a matrix product after flattening X to 2-D at x_num_col_dims and Y at y_num_col_dims. "
          "Out's shape is X's first x_num_col_dims dims followed by Y's dims from y_num_col_dims on.")
      .Input("X", "(Tensor) the first operand, of rank > x_num_col_dims")
      .Input("Y", "(Tensor) the second operand, of rank > y_num_col_dims")
      .Output("Out", "(Tensor) the product")
      .Attr<int>("x_num_col_dims", 1,
                 "(int, default 1) X's first x_num_col_dims dims become the rows of the 2-D view, the rest its "
                 "columns")
      .Attr<int>("y_num_col_dims", 1,
                 "(int, default 1) Y's first y_num_col_dims dims become the rows of the 2-D view, the rest its "
                 "columns")
      .InferShape(InferMulShape)
      .Precision(OpPrecision::kLow)
      .GradMaker<GradFromInputsMaker>()
      .RewritesAfterBackward(ProgramPass{"share_transposed_weights", ShareTransposedWeights})
      .RewritesAfterBackward(ProgramPass{"chain_shared_weight_gradients", ChainSharedWeightGradients})
      .GradCheck(CheckCase("matrix", {CheckInput("X", {3, 4}), CheckInput("Y", {4, 5})}))
      .GradCheck(CheckCase("flatten", {CheckInput("X", {2, 3, 4}), CheckInput("Y", {4, 2, 3})},
                           {{"x_num_col_dims", 2}, {"y_num_col_dims", 1}}))
      .GradCheck(CheckCase("only_x", {CheckInput("X", {2, 3}), NoCheck(CheckInput("Y", {3, 2}))}));
  registrar.DefaultGradOp("mul", __FILE__, __LINE__)
      .Input(kAccumulateY,
             "(Tensor, optional) a partial gradient of Y: Y@GRAD is then AccumulateY + X^T * Out@GRAD, written in "
             "place where both are one var (FuseGradOps chains a shared weight's mul_grads through it instead of "
             "a sum); float32 and float64 on the cpu",
             kDispensable)
      .UpdatesInPlace()  // Y@GRAD accumulates into AccumulateY
      .Attr<bool>(kForceFp32OutputAttr, false, kForceFp32GradsDoc)
      .InferShape(InferGemmGradShapes);
  RegisterCpuKernels<MulKernel, float, double>(registrar, "mul", __FILE__, __LINE__);
  RegisterCpuKernels<MulGradKernel, float, double>(registrar, "mul_grad", __FILE__, __LINE__);
  registrar.Kernel("mul", DeviceType::kCPU, DType::kBFloat16, MulBf16Kernel, __FILE__, __LINE__);
  registrar.Kernel("mul_grad", DeviceType::kCPU, DType::kBFloat16, MulGradBf16Kernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
