// fc: Out = act(Input * W + Bias), Paddle's fully connected op: Input
// flattened to 2-D at in_num_col_dims, W [K, N], Bias [N] or [1, N] added to
// every row, act one of "" (none), relu, tanh, sigmoid.
//
// FuseOps replaces mul + elementwise_add (+ relu, tanh or sigmoid), or mul
// + fused_elemwise_activation, by this op where it computes the same: the
// bias and activation then run on each block of the product right after
// the GEMM that computes it, while it is in cache (cpu::GemmBiasAct: a bare
// bias on oneDNN as a post-op of its matmul, which is exact; every
// activation and every OpenBLAS block through this file's epilogue), instead
// of a second pass over memory and a second op. The epilogue computes what
// fused_elemwise_activation and the activation ops compute, in the same
// order, so fused and unfused programs agree bit for bit (FcFusion tests,
// on either library). Its gradient is the ops the unfused
// program differentiates with (fused_elemwise_activation_grad or
// elementwise_add_grad, then mul_grad), so FuseGradOps' rewrites of
// mul_grad (a weight's sgd step in its gradient's GEMM) still apply and the
// gradients keep their bits too. gelu is not fused: its gradient needs the
// pre-activation sum, which fc does not keep.
#include "bias_activation.h"
#include "gemm_shapes.h"
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

// The activations fc computes: Paddle's "" and relu, and the two the MLPs
// nabla runs use. gelu is the fused op's alone (see above).
bool FcAct(const std::string& name, BiasAct* act) { return ParseBiasAct(name, act) && *act != BiasAct::kGelu; }

BiasAct ActOf(const OpDesc& op, const std::string& where) {
  const std::string& name = op.Attr<std::string>("activation_type");
  BiasAct act;
  NABLA_ENFORCE(FcAct(name, &act), kInvalidArgument, where,
                ": attribute activation_type must be \"\", relu, tanh or sigmoid, but received \"", name, "\"");
  return act;
}

// The same activation as cpu::GemmBiasAct's post-op.
constexpr cpu::GemmAct GemmActOf(BiasAct act) {
  switch (act) {
    case BiasAct::kRelu:
      return cpu::GemmAct::kRelu;
    case BiasAct::kTanh:
      return cpu::GemmAct::kTanh;
    case BiasAct::kSigmoid:
      return cpu::GemmAct::kSigmoid;
    case BiasAct::kIdentity:
    case BiasAct::kGelu:  // refused by FcAct
      break;
  }
  return cpu::GemmAct::kIdentity;
}

void InferFcShape(InferShapeContext& c) {
  ActOf(c.Op(), c.Where());
  NABLA_ENFORCE(!c.Attr<bool>("padding_weights"), kUnimplemented, c.Where(),
                ": padding_weights (W with padded rows and columns) is not supported");
  const Shape x = c.InputShape("Input"), w = c.InputShape("W");
  const int xn = c.Attr<int>("in_num_col_dims");
  const int rank = static_cast<int>(x.size());
  NABLA_ENFORCE(xn >= 1 && xn < rank, kInvalidArgument, c.Where(), ": attribute in_num_col_dims must be in [1, ",
                rank - 1, "] for Input of shape ", ShapeToString(x), ", but received ", xn);
  NABLA_ENFORCE(w.size() == 2, kInvalidArgument, c.Where(), ": W must be 2-D [K, N], but received shape ",
                ShapeToString(w));
  const Flat2D fx = Flatten(x, xn);
  NABLA_ENFORCE(fx.cols < 0 || w[0] < 0 || fx.cols == w[0], kInvalidArgument, c.Where(),
                ": Input flattened by in_num_col_dims=", xn, " is [", fx.rows, ", ", fx.cols, "] (shape ",
                ShapeToString(x), "), so W must have ", fx.cols, " rows, but received shape ", ShapeToString(w));
  if (c.HasInput("Bias")) {
    const Shape b = c.InputShape("Bias");
    const bool ok =
        (b.size() == 1 || (b.size() == 2 && (b[0] == 1 || b[0] < 0))) && (b.back() < 0 || w[1] < 0 || b.back() == w[1]);
    NABLA_ENFORCE(ok, kInvalidArgument, c.Where(), ": Bias must have shape [", w[1], "] or [1, ", w[1],
                  "] (W's columns), but received ", ShapeToString(b));
    NABLA_ENFORCE(c.InputDType("Bias") == c.InputDType("Input"), kInvalidArgument, c.Where(),
                  ": Bias must have Input's dtype ", DTypeName(c.InputDType("Input")), ", but received ",
                  DTypeName(c.InputDType("Bias")));
  }
  NABLA_ENFORCE(c.InputDType("W") == c.InputDType("Input"), kInvalidArgument, c.Where(), ": W must have Input's dtype ",
                DTypeName(c.InputDType("Input")), ", but received ", DTypeName(c.InputDType("W")));
  Shape out(x.begin(), x.begin() + xn);
  out.push_back(w[1]);
  c.SetOutputShape("Out", out);
  c.SetOutputDType("Out", c.InputDType("Input"));
}

// Bias and activation on a block of C (rows [row, row + rows), columns
// [col, col + cols)): per element, what fused_elemwise_activation's forward
// computes (the sum rounded to T, then relu_op's, tanh_op's or
// sigmoid_op's formula; float32 tanh through cpu::Tanh, as they do).
template <typename T, BiasAct act>
struct Epilogue {
  T* c;
  int64_t ldc;
  const T* bias;  // null: no Bias
  static void Run(void* self, int64_t row, int64_t col, int64_t rows, int64_t cols) {
    const Epilogue& e = *static_cast<const Epilogue*>(self);
    const bool whole_rows = col == 0 && cols == e.ldc;  // one contiguous run for cpu::Tanh
    for (int64_t r = 0; r < rows; ++r) {
      T* __restrict o = e.c + (row + r) * e.ldc + col;
      if (e.bias) {
        const T* __restrict b = e.bias + col;
        for (int64_t j = 0; j < cols; ++j) o[j] = static_cast<T>(o[j] + b[j]);
      }
      if constexpr (act == BiasAct::kTanh && std::is_same_v<T, float>) {
        if (!whole_rows) cpu::Tanh(o, o, cols);
      } else {
        for (int64_t j = 0; j < cols; ++j) o[j] = ApplyBiasAct(act, o[j]);
      }
    }
    if constexpr (act == BiasAct::kTanh && std::is_same_v<T, float>) {
      if (whole_rows) cpu::Tanh(e.c + row * e.ldc, e.c + row * e.ldc, rows * cols);
    }
  }
};

template <typename T, BiasAct act>
void FcForward(int64_t m, int64_t n, int64_t k, const T* x, const T* w, const T* bias, T* out) {
  Epilogue<T, act> e{out, n, bias};
  cpu::GemmBiasAct(nullptr, m, n, k, x, k, w, n, bias, GemmActOf(act), out, n, &Epilogue<T, act>::Run, &e);
}

template <typename T>
void FcKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& w = ctx.Input("W");
  const Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("in_num_col_dims"));
  const int64_t m = fx.rows, k = fx.cols, n = w.GetShape().back();
  NABLA_ENFORCE(w.GetShape().size() == 2 && w.GetShape()[0] == k, kInvalidArgument, "op 'fc': W must be [", k, ", N]",
                " for Input of shape ", ShapeToString(x.GetShape()), ", but received ", ShapeToString(w.GetShape()));
  const T* bias = nullptr;
  if (ctx.HasInput("Bias")) {
    const Tensor& b = ctx.Input("Bias");
    NABLA_ENFORCE(b.Numel() == n, kInvalidArgument, "op 'fc': Bias must have ", n, " elements, but received shape ",
                  ShapeToString(b.GetShape()));
    bias = b.Data<T>();
  }
  // One Shape: the C ABI's GetShape returns a copy each call.
  const Shape xs = x.GetShape();
  Shape out_shape(xs.begin(), xs.begin() + ctx.Attr<int>("in_num_col_dims"));
  out_shape.push_back(n);
  T* out = AllocOutput<T>(ctx, ctx.Output("Out"), out_shape);
  const T* xd = x.Data<T>();
  const T* wd = w.Data<T>();
  switch (ActOf(ctx.Op(), "op 'fc'")) {
    case BiasAct::kIdentity:
      return FcForward<T, BiasAct::kIdentity>(m, n, k, xd, wd, bias, out);
    case BiasAct::kRelu:
      return FcForward<T, BiasAct::kRelu>(m, n, k, xd, wd, bias, out);
    case BiasAct::kTanh:
      return FcForward<T, BiasAct::kTanh>(m, n, k, xd, wd, bias, out);
    case BiasAct::kSigmoid:
      return FcForward<T, BiasAct::kSigmoid>(m, n, k, xd, wd, bias, out);
    case BiasAct::kGelu:  // refused by ActOf
      break;
  }
}

// The unfused program's grad ops: the activation and bias part
// (fused_elemwise_activation_grad; elementwise_add_grad without an
// activation; the activation's own grad op without a bias) writes the
// product's gradient, then mul_grad. The product itself is never stored:
// those grad ops read X only for its shape, which is Out's.
class FcGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    const std::string& act = Attr<std::string>("activation_type");
    const bool has_bias = ForwardOp().HasInput("Bias");
    const std::vector<std::string> out = Output("Out"), dout = OutputGrad("Out");
    const std::vector<std::string> dx = InputGrad("Input"), dw = InputGrad("W");
    const std::vector<std::string> db = has_bias ? InputGrad("Bias") : std::vector<std::string>{kEmptyVarName};
    const bool gemm_grads = GradWanted(dx) || GradWanted(dw);
    std::vector<std::unique_ptr<OpDesc>> ops;
    std::vector<std::string> dproduct = dout;
    if (has_bias || !act.empty()) {
      dproduct = {gemm_grads ? GradVarName(out[0] + "@fc_product") : kEmptyVarName};
      if (has_bias && !act.empty()) {
        ops.push_back(MakeOp("fused_elemwise_activation_grad",
                             {{"X", out}, {"Y", Input("Bias")}, {"Out", out}, {GradVarName("Out"), dout}},
                             {{GradVarName("X"), dproduct}, {GradVarName("Y"), db}},
                             {{"axis", -1}, {"functor_list", std::vector<std::string>{act, "elementwise_add"}}}));
      } else if (has_bias) {
        ops.push_back(MakeOp("elementwise_add_grad",
                             {{"X", out}, {"Y", Input("Bias")}, {"Out", out}, {GradVarName("Out"), dout}},
                             {{GradVarName("X"), dproduct}, {GradVarName("Y"), db}}, {{"axis", -1}}));
      } else {
        ops.push_back(
            MakeOp(act + "_grad", {{"Out", out}, {GradVarName("Out"), dout}}, {{GradVarName("X"), dproduct}}));
      }
      if (!GradWanted(dproduct) && !GradWanted(db)) ops.clear();
    }
    if (gemm_grads)
      ops.push_back(MakeOp("mul_grad", {{"X", Input("Input")}, {"Y", Input("W")}, {GradVarName("Out"), dproduct}},
                           {{GradVarName("X"), dx}, {GradVarName("Y"), dw}},
                           {{"x_num_col_dims", Attr<int>("in_num_col_dims")}, {"y_num_col_dims", 1}}));
    return ops;
  }
};

// ---------------------------------------------------------------- fusion

const VarDesc* KnownVar(const BlockDesc& block, const std::string& name) {
  const VarDesc* v = block.FindVarRecursive(name);
  if (!v || !v->HasDType() || (v->GetDType() != DType::kFloat32 && v->GetDType() != DType::kFloat64)) return nullptr;
  return v;
}

// Whether mul (m[0]) then the bias add (m[1], elementwise_add or
// fused_elemwise_activation) compute exactly what fc computes: the product
// is the add's X, W is 2-D and not flattened, the bias is [N] (or [1, N])
// over the product's last dim, all float32 or all float64.
bool FcApplies(const BlockDesc& block, const std::vector<const OpDesc*>& m) {
  const OpDesc& mul = *m[0];
  const OpDesc& add = *m[1];
  if (mul.Input("X").size() != 1 || mul.Input("Y").size() != 1 || add.Input("X") != mul.Output("Out") ||
      add.Input("Y").size() != 1)
    return false;
  if (mul.HasAttr("y_num_col_dims") && mul.Attr<int>("y_num_col_dims") != 1) return false;
  const int xn = mul.HasAttr("x_num_col_dims") ? mul.Attr<int>("x_num_col_dims") : 1;
  const VarDesc* x = KnownVar(block, mul.Input("X")[0]);
  const VarDesc* w = KnownVar(block, mul.Input("Y")[0]);
  const VarDesc* b = KnownVar(block, add.Input("Y")[0]);
  if (!x || !w || !b || x->GetDType() != w->GetDType() || b->GetDType() != w->GetDType()) return false;
  const Shape& ws = w->GetShape();
  const Shape& bs = b->GetShape();
  if (ws.size() != 2 || ws[1] < 0 || static_cast<int>(x->GetShape().size()) <= xn) return false;
  const bool bias_row = (bs.size() == 1 || (bs.size() == 2 && bs[0] == 1)) && bs.back() == ws[1];
  const int axis = add.HasAttr("axis") ? add.Attr<int>("axis") : -1;
  // The product has rank xn + 1: [N] aligns with its last dim at axis -1 or
  // xn; [1, N] only at the end.
  return bias_row && (axis == -1 || (bs.size() == 1 && axis == xn));
}

std::unique_ptr<OpDesc> MakeFc(const OpDesc& mul, const OpDesc& add, const OpDesc& last, const std::string& act) {
  return std::make_unique<OpDesc>(
      "fc", VarNameMap{{"Input", mul.Input("X")}, {"W", mul.Input("Y")}, {"Bias", add.Input("Y")}},
      VarNameMap{{"Out", last.Output("Out")}},
      AttributeMap{{"in_num_col_dims", mul.HasAttr("x_num_col_dims") ? mul.Attr<int>("x_num_col_dims") : 1},
                   {"activation_type", act}});
}

// mul + elementwise_add alone, unless the sum goes to an erf-form gelu:
// fused_elemwise_activation takes that add (its gradient recomputes the sum
// in one pass; fc + gelu would need gelu_grad and elementwise_add_grad).
bool FcWithoutActApplies(const BlockDesc& block, const std::vector<const OpDesc*>& m) {
  if (!FcApplies(block, m)) return false;
  const std::string& sum = m[1]->Output("Out").at(0);
  for (const auto& op : block.AllOps()) {
    if (op->Type() != "gelu" || op->Input("X") != std::vector<std::string>{sum}) continue;
    if (!op->HasAttr("approximate") || !op->Attr<bool>("approximate")) return false;
  }
  return true;
}

// mul, elementwise_add[, act] -> fc.
std::unique_ptr<OpDesc> FuseMulAdd(const std::vector<const OpDesc*>& m) {
  return MakeFc(*m[0], *m[1], *m.back(), m.size() == 3 ? m[2]->Type() : std::string());
}

// mul, fused_elemwise_activation -> fc, for an activation fc has.
std::unique_ptr<OpDesc> FuseMulFusedAct(const std::vector<const OpDesc*>& m) {
  const auto& list = m[1]->Attr<std::vector<std::string>>("functor_list");
  BiasAct act;
  if (list.size() != 2 || list[1] != "elementwise_add" || list[0].empty() || !FcAct(list[0], &act)) return nullptr;
  return MakeFc(*m[0], *m[1], *m[1], list[0]);
}

NABLA_REGISTER_OPS(fc) {
  auto fc_case = [](const std::string& name, Shape x, Shape w, bool bias, const std::string& act, int xn, double lo,
                    double hi) {
    std::vector<GradCheckInput> inputs{CheckInput("Input", std::move(x), lo, hi), CheckInput("W", w, lo, hi)};
    if (bias) inputs.push_back(CheckInput("Bias", {w[1]}, lo, hi));
    return CheckCase(name, std::move(inputs), {{"in_num_col_dims", xn}, {"activation_type", act}});
  };
  OpBuilder& b =
      registrar.Op("fc", __FILE__, __LINE__)
          .Doc(
              "Out = act(Input * W + Bias): Input flattened to 2-D at in_num_col_dims, W [K, N], Bias [N] or [1, N] "
              "added to every row; Out's shape is Input's first in_num_col_dims dims followed by N. Chosen by the "
              "fusion pass for mul followed by a bias add (and relu, tanh or sigmoid): bias and activation run on "
              "the product block by block as it is computed.")
          .Input("Input", "(Tensor) the input, float32 or float64, of rank > in_num_col_dims")
          .Input("W", "(Tensor) the weight [K, N], K the product of Input's dims from in_num_col_dims on")
          .Input("Bias", "(Tensor, optional) the bias, [N] or [1, N]", kDispensable)
          .Output("Out", "(Tensor) act(Input * W + Bias)")
          .Attr<int>("in_num_col_dims", 1,
                     "(int, default 1) Input's first in_num_col_dims dims become the rows of its 2-D view, the rest "
                     "its columns")
          .Attr<std::string>("activation_type", "",
                             "(string, default \"\") the activation after the bias: \"\" (none), relu, tanh or "
                             "sigmoid")
          .Attr<bool>("padding_weights", false,
                      "(bool, default false) Paddle's W with 4 padding rows and columns; must be false")
          .InferShape(InferFcShape)
          .GradMaker<FcGradMaker>()
          .GradCheck(fc_case("tanh", {3, 4}, {4, 5}, true, "tanh", 1, -1.0, 1.0))
          .GradCheck(fc_case("sigmoid", {3, 4}, {4, 5}, true, "sigmoid", 1, -1.0, 1.0))
          .GradCheck(fc_case("relu", {3, 4}, {4, 5}, true, "relu", 1, 0.1, 1.0))  // all sums > 0: off the kink
          .GradCheck(fc_case("no_act", {3, 4}, {4, 5}, true, "", 1, -1.0, 1.0))
          .GradCheck(fc_case("rank3_tanh", {2, 3, 4}, {4, 5}, true, "tanh", 2, -1.0, 1.0))
          .GradCheck(fc_case("rank3_flatten", {2, 3, 4}, {12, 5}, true, "sigmoid", 1, -1.0, 1.0))
          .GradCheck(fc_case("no_bias", {3, 4}, {4, 5}, false, "", 1, -1.0, 1.0));
  for (const char* act : {"relu", "tanh", "sigmoid"})
    b.Fuses(FusionPattern{{"mul", "elementwise_add", act}, FuseMulAdd, FcApplies});
  b.Fuses(FusionPattern{{"mul", "fused_elemwise_activation"}, FuseMulFusedAct, FcApplies});
  b.Fuses(FusionPattern{{"mul", "elementwise_add"}, FuseMulAdd, FcWithoutActApplies});
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel("fc", DeviceType::kCPU, DTypeOf<T>::value, FcKernel<T>, __FILE__, __LINE__);
  });
}

}  // namespace
}  // namespace nabla::math_ops
