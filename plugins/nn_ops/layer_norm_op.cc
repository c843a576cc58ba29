// layer_norm: X is seen as a [left, right] matrix split at begin_norm_axis;
// each row is normalized to zero mean and unit variance, then scaled and
// shifted by the optional Scale and Bias of size `right`. Mean and Variance
// (per row, the biased variance as in Paddle) are saved for the gradient.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nabla/cpu/vmath.h"
#include "nabla/opkit/program_uses.h"
#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

void SplitRows(const Shape& shape, int begin, int64_t* left, int64_t* right) {
  *left = ProductOf(shape, 0, begin);
  *right = ProductOf(shape, begin, shape.size());
}

template <typename T>
void LayerNormKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* scale = ctx.HasInput("Scale") ? ctx.Input("Scale").Data<T>() : nullptr;
  const T* bias = ctx.HasInput("Bias") ? ctx.Input("Bias").Data<T>() : nullptr;
  const double eps = ctx.Attr<float>("epsilon");
  int64_t left, right;
  SplitRows(x.GetShape(), ctx.Attr<int>("begin_norm_axis"), &left, &right);
  const T* px = x.Data<T>();
  T* py = ctx.Output("Y")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  T* pmean = ctx.Output("Mean")->Allocate<T>(ctx.GetDevice(), {left});
  T* pvar = ctx.Output("Variance")->Allocate<T>(ctx.GetDevice(), {left});
  if constexpr (std::is_same_v<T, float>) {
    const float epsf = static_cast<float>(eps);
    // A call for a task's rows (the backend interleaves them) where rows
    // have elements; an empty row's NaN mean is the one-row kernel's.
    cpu::ParallelFor(left, cpu::GrainForRows(right), [&](int64_t r0, int64_t r1) {
      if (right > 0)
        cpu::LayerNormRows(px + r0 * right, r1 - r0, right, scale, bias, epsf, py + r0 * right, pmean + r0, pvar + r0);
      else
        for (int64_t r = r0; r < r1; ++r) cpu::LayerNormRow(px, 0, scale, bias, epsf, py, pmean + r, pvar + r);
    });
    return;
  }
  for (int64_t r = 0; r < left; ++r) {
    const T* row = px + r * right;
    // Two passes in double: a one-pass E[x^2] - E[x]^2 cancels badly when
    // the mean is large against the spread.
    double mean = 0.0;
    for (int64_t j = 0; j < right; ++j) mean += row[j];
    mean /= static_cast<double>(right);
    double var = 0.0;
    for (int64_t j = 0; j < right; ++j) {
      const double d = row[j] - mean;
      var += d * d;
    }
    var /= static_cast<double>(right);
    const double rstd = 1.0 / std::sqrt(var + eps);
    pmean[r] = static_cast<T>(mean);
    pvar[r] = static_cast<T>(var);
    T* out = py + r * right;
    for (int64_t j = 0; j < right; ++j) {
      double v = (row[j] - mean) * rstd;
      if (scale) v *= scale[j];
      if (bias) v += bias[j];
      out[j] = static_cast<T>(v);
    }
  }
}

// layer_norm_grad's optional input (accumulate_residual_gradients below).
constexpr const char* kAccumulateX = "AccumulateX";

// With xhat = (x - mean) * rstd and g = dY * Scale:
//   dX = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dScale = sum_rows(dY * xhat), dBias = sum_rows(dY).
template <typename T>
void LayerNormGradKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& dy = ctx.Input(GradVarName("Y"));
  const T* pmean = ctx.Input("Mean").Data<T>();
  const T* pvar = ctx.Input("Variance").Data<T>();
  const T* scale = ctx.HasInput("Scale") ? ctx.Input("Scale").Data<T>() : nullptr;
  const double eps = ctx.Attr<float>("epsilon");
  int64_t left, right;
  SplitRows(x.GetShape(), ctx.Attr<int>("begin_norm_axis"), &left, &right);
  Tensor* dx = ctx.Output(GradVarName("X"));
  Tensor* dscale = ctx.Output(GradVarName("Scale"));
  Tensor* dbias = ctx.Output(GradVarName("Bias"));
  const T* px = x.Data<T>();
  const T* pdy = dy.Data<T>();
  // AccumulateX (accumulate_residual_gradients): X@GRAD = AccumulateX + this
  // op's gradient, each row added as the sum op it replaces adds.
  const T* pacc = nullptr;
  if (ctx.HasInput(kAccumulateX)) {
    const Tensor& acc = ctx.Input(kAccumulateX);
    NABLA_ENFORCE(acc.GetShape() == x.GetShape(), kInvalidArgument, kAccumulateX, " has shape ",
                  ShapeToString(acc.GetShape()), " but X has ", ShapeToString(x.GetShape()));
    NABLA_ENFORCE(dx != nullptr, kInvalidArgument, kAccumulateX, " needs an X@GRAD to add to");
    pacc = acc.Data<T>();
  }
  T* pdx = dx ? dx->Allocate<T>(ctx.GetDevice(), x.GetShape()) : nullptr;
  // Where X@GRAD got the partial's own buffer (in place, AccumulateX and
  // X@GRAD one var), the float64 path copies the partial first: its rows
  // are written before they are added to (float32's backend kernel adds
  // each element as it writes it). By address: the tensors may be distinct
  // handles.
  std::vector<T> acc_copy;
  if (!std::is_same_v<T, float> && pacc && pacc == pdx) {
    acc_copy.assign(pacc, pacc + x.Numel());
    pacc = acc_copy.data();
  }
  auto add_partial = [&](int64_t r) {
    if (!pacc) return;
    T* d = pdx + r * right;
    const T* a = pacc + r * right;
    for (int64_t j = 0; j < right; ++j) d[j] = a[j] + d[j];
  };
  if constexpr (std::is_same_v<T, float>) {
    // Rows in blocks of a fixed size, whatever the thread count: each block
    // sums its own partial Scale and Bias gradients, and the blocks' partials
    // are added in block order, so the bits never depend on --threads.
    const int64_t block = std::max<int64_t>(1, 8192 / std::max<int64_t>(right, 1));
    const int64_t blocks = (left + block - 1) / block;
    std::vector<float> part_scale(dscale ? blocks * right : 0, 0.0f), part_bias(dbias ? blocks * right : 0, 0.0f);
    cpu::ParallelFor(blocks, cpu::GrainForRows(block * right), [&](int64_t b0, int64_t b1) {
      std::vector<float> rstd(static_cast<size_t>(block));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * block, r1 = std::min(left, (b + 1) * block);
        for (int64_t r = r0; r < r1; ++r)
          rstd[r - r0] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pvar[r]) + eps));
        // A call for the block's rows, the partial added as each element
        // of X@GRAD is written (a pass over the block afterwards read X@GRAD
        // back from L2: 0.27 -> 0.34 ms for the GPT step's three).
        auto at = [&](auto* p) { return p ? p + r0 * right : nullptr; };
        cpu::LayerNormGradRows(px + r0 * right, pdy + r0 * right, r1 - r0, right, pmean + r0, rstd.data(), scale,
                               at(pacc), at(pdx), dscale ? &part_scale[b * right] : nullptr,
                               dbias ? &part_bias[b * right] : nullptr);
      }
    });
    for (auto [grad, part] : {std::pair{dscale, &part_scale}, std::pair{dbias, &part_bias}}) {
      if (!grad) continue;
      float* p = grad->template Allocate<float>(ctx.GetDevice(), {right});
      for (int64_t j = 0; j < right; ++j) {
        double sum = 0.0;
        for (int64_t b = 0; b < blocks; ++b) sum += (*part)[b * right + j];
        p[j] = static_cast<float>(sum);
      }
    }
    return;
  }
  std::vector<double> acc_scale(dscale ? right : 0, 0.0), acc_bias(dbias ? right : 0, 0.0);
  std::vector<double> xhat(right), g(right);
  for (int64_t r = 0; r < left; ++r) {
    const T* row = px + r * right;
    const T* drow = pdy + r * right;
    const double mean = pmean[r];
    const double rstd = 1.0 / std::sqrt(static_cast<double>(pvar[r]) + eps);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t j = 0; j < right; ++j) {
      xhat[j] = (row[j] - mean) * rstd;
      g[j] = scale ? static_cast<double>(drow[j]) * scale[j] : static_cast<double>(drow[j]);
      mean_g += g[j];
      mean_gx += g[j] * xhat[j];
      if (dscale) acc_scale[j] += static_cast<double>(drow[j]) * xhat[j];
      if (dbias) acc_bias[j] += drow[j];
    }
    mean_g /= static_cast<double>(right);
    mean_gx /= static_cast<double>(right);
    if (pdx) {
      for (int64_t j = 0; j < right; ++j)
        pdx[r * right + j] = static_cast<T>(rstd * (g[j] - mean_g - xhat[j] * mean_gx));
      add_partial(r);
    }
  }
  if (dscale) {
    T* p = dscale->Allocate<T>(ctx.GetDevice(), {right});
    std::transform(acc_scale.begin(), acc_scale.end(), p, [](double v) { return static_cast<T>(v); });
  }
  if (dbias) {
    T* p = dbias->Allocate<T>(ctx.GetDevice(), {right});
    std::transform(acc_bias.begin(), acc_bias.end(), p, [](double v) { return static_cast<T>(v); });
  }
}

// After the backward part (FuseGradOps): in a pre-norm block the residual
// stream x feeds both a layer_norm and the add past the block, so x's
// gradient is a sum op of the layer_norm_grad's X@GRAD and the residual's
// gradient: a read of two activation-sized arrays and a write of a third
// after the layer_norm_grad has just written one of them (the GPT block's
// two residuals, B=8, T=256: 0.5 ms of a 120 ms step). Where a two-part
// sum adds a layer_norm_grad's float32 X@GRAD, read by the sum alone and
// not kept, to a part that no op between them writes, the layer_norm_grad
// adds that part itself (AccumulateX) and writes the sum's output. The same
// additions (a + b, in either order, has one result), so the same bits.
size_t AccumulateResidualGradients(ProgramDesc& program, const std::unordered_set<std::string>& keep) {
  BlockDesc& block = *program.Root();
  auto registry = CurrentRegistry();
  std::unordered_map<std::string, int> readers, writers;
  opkit::CountUses(program, readers, writers);
  auto float32 = [&](const std::string& name) {
    const VarDesc* v = block.FindVarRecursive(name);
    return v && v->GetDType() == DType::kFloat32 ? v : nullptr;
  };
  size_t changed = 0;
  for (size_t s = 0; s < block.OpSize(); ++s) {
    const OpDesc& sum = *block.Op(s);
    if (sum.Type() != "sum" || sum.Output("Out").size() != 1 || sum.Input("X").size() != 2) continue;
    const std::string grad = sum.Output("Out")[0];
    const std::vector<std::string> parts = sum.Input("X");
    if (writers[grad] != 1 || parts[0] == parts[1] || grad == parts[0] || grad == parts[1] ||
        parts[0] == kEmptyVarName || parts[1] == kEmptyVarName)
      continue;
    for (int p = 0; p < 2; ++p) {
      const std::string &own = parts[p], &other = parts[1 - p];
      const VarDesc* ov = float32(own);
      const VarDesc* pv = float32(other);
      const VarDesc* gv = float32(grad);
      if (!ov || !pv || !gv || ov->Persistable() || keep.count(own) || readers[own] != 1 || writers[own] != 1 ||
          ov->GetShape() != pv->GetShape() || ov->GetShape() != gv->GetShape())
        continue;
      size_t w = s;
      while (w > 0 && !opkit::Touches(*block.Op(w - 1), own)) --w;
      if (w-- == 0) continue;
      const OpDesc& op = *block.Op(w);
      if (op.Type() != "layer_norm_grad" || op.Output(GradVarName("X")) != std::vector<std::string>{own} ||
          op.HasInput(kAccumulateX) || opkit::Touches(op, other) || opkit::Touches(op, grad))
        continue;
      // From the layer_norm_grad to the sum nothing writes the other part
      // or touches the gradient, nor owns a block (whose body could).
      bool clear = true;
      for (size_t i = w + 1; i < s && clear; ++i) {
        const OpDesc& between = *block.Op(i);
        const OpInfo* info = registry->Find(between.Type());
        const auto outs = between.OutputArgumentNames();
        clear = info && !info->traits.has_sub_block && !opkit::Touches(between, grad) &&
                std::find(outs.begin(), outs.end(), other) == outs.end();
      }
      if (!clear) continue;
      OpDesc& target = *block.Op(w);
      target.SetInput(kAccumulateX, {other});
      target.SetOutput(GradVarName("X"), {grad});
      block.RemoveOps(s, s + 1);
      const VarDesc* gone = block.FindVar(own);
      if (gone && !gone->Declared()) block.RemoveVar(own);
      ++changed;
      --s;
      opkit::CountUses(program, readers, writers);
      break;
    }
  }
  return changed;
}

void InferLayerNorm(InferShapeContext& c) {
  const Shape x = c.InputShape("X");
  const DType dtype = c.InputDType("X");
  EnforceFloatDType(dtype, c.Where(), "X");
  const int begin = c.Attr<int>("begin_norm_axis");
  NABLA_ENFORCE(begin >= 1 && begin < static_cast<int>(x.size()), kOutOfRange, c.Where(),
                ": begin_norm_axis must be in [1, ", x.size(), ") for X of shape ", ShapeToString(x), ", but received ",
                begin);
  int64_t left, right;
  SplitRows(x, begin, &left, &right);
  for (const char* slot : {"Scale", "Bias"}) {
    if (!c.HasInput(slot)) continue;
    const Shape s = c.InputShape(slot);
    NABLA_ENFORCE(s.size() == 1 && DimsCompatible(s[0], right), kInvalidArgument, c.Where(), ": ", slot,
                  " must have shape [", right, "] (the product of X's dims from begin_norm_axis ", begin,
                  "), but received ", ShapeToString(s));
    NABLA_ENFORCE(c.InputDType(slot) == dtype, kInvalidArgument, c.Where(), ": ", slot, " must have X's dtype ",
                  DTypeName(dtype), ", but received ", DTypeName(c.InputDType(slot)));
  }
  c.ShareShapeAndDType("X", "Y");
  for (const char* slot : {"Mean", "Variance"}) {
    c.SetOutputShape(slot, {left});
    c.SetOutputDType(slot, dtype);
  }
}

class LayerNormGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    VarNameMap in{{"X", Input("X")},
                  {"Mean", Output("Mean")},
                  {"Variance", Output("Variance")},
                  {GradVarName("Y"), OutputGrad("Y")}};
    VarNameMap out{{GradVarName("X"), InputGrad("X")}};
    if (ForwardOp().HasInput("Scale")) {
      in["Scale"] = Input("Scale");
      out[GradVarName("Scale")] = InputGrad("Scale");
    }
    if (ForwardOp().HasInput("Bias")) {
      in["Bias"] = Input("Bias");  // for Bias@GRAD's shape only
      out[GradVarName("Bias")] = InputGrad("Bias");
    }
    return OneOp("layer_norm_grad", std::move(in), std::move(out), Attrs());
  }
};

}  // namespace

NABLA_REGISTER_OPS(layer_norm) {
  GradCheckSpec affine =
      CheckCase("scale_bias", {CheckInput("X", {3, 2, 4}), CheckInput("Scale", {8}, 0.5, 1.5), CheckInput("Bias", {8})},
                {}, {{"Y", 1}, {"Mean", 1}, {"Variance", 1}});
  affine.no_grad_outputs = {"Mean", "Variance"};
  GradCheckSpec plain =
      CheckCase("no_affine_axis2", {CheckInput("X", {2, 3, 5})}, {}, {{"Y", 1}, {"Mean", 1}, {"Variance", 1}});
  plain.no_grad_outputs = {"Mean", "Variance"};
  plain.attrs = {{"begin_norm_axis", 2}};
  registrar.Op("layer_norm", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .Doc(
          "Layer normalization: with X flattened to [left, right] at begin_norm_axis, "
          "Y = (X - Mean) / sqrt(Variance + epsilon) * Scale + Bias per row.")
      .Input("X", "(Tensor) input, float32 or float64")
      .Input("Scale", "(Tensor, optional) per-feature scale, shape [right]", kDispensable)
      .Input("Bias", "(Tensor, optional) per-feature shift, shape [right]", kDispensable)
      .Output("Y", "(Tensor) the normalized X, shape and dtype of X")
      .Output("Mean", "(Tensor) the mean of each row, shape [left]")
      .Output("Variance", "(Tensor) the biased variance of each row, shape [left]")
      .Attr<float>("epsilon", 1e-5f, "(float, default 1e-5) added to the variance before the square root",
                   [](const float& e) {
                     NABLA_ENFORCE(e >= 0.0f, kInvalidArgument, "attribute epsilon must be >= 0, but received ", e);
                   })
      .Attr<int>("begin_norm_axis", 1,
                 "(int, default 1) X's dims from this one on form the normalized row; in [1, rank(X))")
      .InferShape(InferLayerNorm)
      .GradMaker<LayerNormGradMaker>()
      .GradCheck(affine)
      .GradCheck(plain)
      .RewritesAfterBackward(ProgramPass{"accumulate_residual_gradients", AccumulateResidualGradients});
  OpBuilder& grad = registrar.DefaultGradOp("layer_norm", __FILE__, __LINE__);
  grad.Doc("Gradient of layer_norm with respect to X, Scale and Bias, from the saved Mean and Variance.")
      .InferShape([](InferShapeContext& c) {
        InferSameAs(c, "X", GradVarName("X"));
        if (c.HasInput("Scale")) InferSameAs(c, "Scale", GradVarName("Scale"));
        if (c.HasInput("Bias")) InferSameAs(c, "Bias", GradVarName("Bias"));
      })
      .KernelDType(DTypeOfInput(GradVarName("Y")));
  grad.Input(kAccumulateX,
             "(Tensor, optional) a partial gradient of X: X@GRAD is then AccumulateX plus this op's gradient of X "
             "(FuseGradOps's accumulate_residual_gradients, in place of a sum op); float32 and float64",
             kDispensable);
  grad.NoBufferInput("Bias");
  RegisterFloatKernels(registrar, "layer_norm", LayerNormKernel<float>, LayerNormKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "layer_norm_grad", LayerNormGradKernel<float>, LayerNormGradKernel<double>, __FILE__,
                       __LINE__);
}

}  // namespace nabla::nn
