// softmax_with_cross_entropy: softmax and cross entropy fused along `axis`.
// The loss comes from log-sum-exp (loss = (max - logit[label]) + log(sum))
// rather than from log(softmax), so it stays finite and accurate for
// confident logits. The gradient reads the saved Softmax:
// dLogits = dLoss * (Softmax * sum(Label) - Label). With use_softmax false
// (Paddle's attribute) Logits are probabilities and the op is cross_entropy
// along `axis`, Softmax a copy of Logits.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "nabla/cpu/vmath.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

// Every hard label is a class index in [0, dim) or ignore_index.
void CheckLabels(const IndexReader& label, int64_t rows, int64_t dim, int ignore) {
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t l = label[row];
    NABLA_ENFORCE(l == ignore || (l >= 0 && l < dim), kOutOfRange, "Label[", row, "] must be in [0, ", dim,
                  ") or equal ignore_index ", ignore, ", but received ", l);
  }
}

template <typename T>
void SoftmaxWithCrossEntropyKernel(const ExecutionContext& ctx) {
  const Tensor& logits = ctx.Input("Logits");
  const Tensor& label = ctx.Input("Label");
  const IndexReader label_at(label);
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), logits.Rank(), "axis", "softmax_with_cross_entropy");
  const bool soft = ctx.Attr<bool>("soft_label");
  const bool use_softmax = ctx.Attr<bool>("use_softmax");
  const int ignore = ctx.Attr<int>("ignore_index");
  const AxisView v = ViewAround(logits.GetShape(), axis);
  const T* px = logits.Data<T>();
  T* ps = ctx.Output("Softmax")->Allocate<T>(ctx.GetDevice(), logits.GetShape());
  T* pl = ctx.Output("Loss")->Allocate<T>(ctx.GetDevice(),
                                          SoftmaxCrossEntropyLossShape(logits.GetShape(), label.GetShape(), axis));
  const T* psoft = soft ? label.Data<T>() : nullptr;
  const int64_t rows = v.outer * v.inner;
  // Labels are checked first, in order, so a bad one fails the same way with
  // any number of threads; then rows are independent and split.
  if (!soft) CheckLabels(label_at, rows, v.dim, ignore);
  if (v.dim == 0) {  // no classes: each row's loss is an empty sum (its label is ignore_index)
    std::fill(pl, pl + rows, T(0));
    return;
  }
  if (!use_softmax) {
    // Logits are probabilities already: Softmax is a copy and the loss is
    // cross_entropy's, with its clipped log.
    std::copy(px, px + logits.Numel(), ps);
    ForEachAxisRow(v, [&](int64_t row, int64_t base) {
      if (soft) {
        double loss = 0.0;
        for (int64_t d = 0; d < v.dim; ++d) {
          const int64_t k = base + d * v.inner;
          loss -= static_cast<double>(psoft[k]) * static_cast<double>(ClippedLog(px[k]));
        }
        pl[row] = static_cast<T>(loss);
        return;
      }
      const int64_t l = label_at[row];
      pl[row] = l == ignore ? T(0) : -ClippedLog(px[base + l * v.inner]);
    });
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (v.inner == 1 && !soft) {  // contiguous rows, hard labels: the vector row kernels
      ForEachAxisRow(v, [&](int64_t row, int64_t base) {
        const float m = cpu::RowMax(px + base, v.dim);
        const float sum = cpu::ExpShiftedSum(px + base, m, ps + base, v.dim);
        cpu::ScaleRow(ps + base, 1.0f / sum, v.dim);
        const int64_t l = label_at[row];
        pl[row] =
            l == ignore ? 0.0f : static_cast<float>(static_cast<double>(m - px[base + l]) + std::log(double{sum}));
      });
      return;
    }
  }
  ForEachAxisRow(v, [&](int64_t row, int64_t base) {
    T m = px[base];
    for (int64_t d = 1; d < v.dim; ++d) m = std::max(m, px[base + d * v.inner]);
    // Everything goes through X - max (exact near the max), never through
    // lse = max + log(sum), which rounds at X's magnitude.
    double sum = 0.0;
    for (int64_t d = 0; d < v.dim; ++d) sum += std::exp(static_cast<double>(px[base + d * v.inner] - m));
    const double log_sum = std::log(sum);
    for (int64_t d = 0; d < v.dim; ++d)
      ps[base + d * v.inner] = static_cast<T>(std::exp(static_cast<double>(px[base + d * v.inner] - m) - log_sum));
    if (soft) {
      double loss = 0.0;
      for (int64_t d = 0; d < v.dim; ++d) {
        const int64_t k = base + d * v.inner;
        loss += static_cast<double>(psoft[k]) * (static_cast<double>(m - px[k]) + log_sum);
      }
      pl[row] = static_cast<T>(loss);
      return;
    }
    const int64_t l = label_at[row];
    pl[row] = l == ignore ? T(0) : static_cast<T>(static_cast<double>(m - px[base + l * v.inner]) + log_sum);
  });
}

template <typename T>
void SoftmaxWithCrossEntropyGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("Logits"));
  if (!dx) return;
  const Tensor& softmax = ctx.Input("Softmax");
  const Tensor& label = ctx.Input("Label");
  const IndexReader label_at(label);
  const Tensor& dloss = ctx.Input(GradVarName("Loss"));
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), softmax.Rank(), "axis", "softmax_with_cross_entropy_grad");
  const bool soft = ctx.Attr<bool>("soft_label");
  const bool use_softmax = ctx.Attr<bool>("use_softmax");
  const int ignore = ctx.Attr<int>("ignore_index");
  const AxisView v = ViewAround(softmax.GetShape(), axis);
  const T* ps = softmax.Data<T>();
  const T* pdl = dloss.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), softmax.GetShape());
  const T* psoft = soft ? label.Data<T>() : nullptr;
  const int64_t rows = v.outer * v.inner;
  if (!soft) CheckLabels(label_at, rows, v.dim, ignore);
  ForEachAxisRow(v, [&](int64_t row, int64_t base) {
    const T g = pdl[row];
    if (soft) {
      if (!use_softmax) {  // d(-sum(Label * log(P)))/dP, through the clipped log
        for (int64_t d = 0; d < v.dim; ++d) {
          const int64_t k = base + d * v.inner;
          pdx[k] = g * psoft[k] * ClippedLogGrad(ps[k]);
        }
        return;
      }
      double mass = 0.0;
      for (int64_t d = 0; d < v.dim; ++d) mass += static_cast<double>(psoft[base + d * v.inner]);
      for (int64_t d = 0; d < v.dim; ++d) {
        const int64_t k = base + d * v.inner;
        pdx[k] = static_cast<T>(static_cast<double>(g) *
                                (static_cast<double>(ps[k]) * mass - static_cast<double>(psoft[k])));
      }
      return;
    }
    const int64_t l = label_at[row];
    if (l == ignore) {
      for (int64_t d = 0; d < v.dim; ++d) pdx[base + d * v.inner] = T(0);
      return;
    }
    if (use_softmax && v.inner == 1) {  // contiguous: a loop the compiler vectorizes
      for (int64_t d = 0; d < v.dim; ++d) pdx[base + d] = g * ps[base + d];
      pdx[base + l] = g * (ps[base + l] - T(1));
      return;
    }
    for (int64_t d = 0; d < v.dim; ++d) {
      const int64_t k = base + d * v.inner;
      if (use_softmax)
        pdx[k] = g * (ps[k] - (d == l ? T(1) : T(0)));
      else
        pdx[k] = d == l ? g * ClippedLogGrad(ps[k]) : T(0);
    }
  });
}

void InferSoftmaxWithCrossEntropy(InferShapeContext& c) {
  const Shape x = c.InputShape("Logits");
  const Shape label = c.InputShape("Label");
  EnforceFloatDType(c.InputDType("Logits"), c.Where(), "Logits");
  const int axis = NormalizeAxis(c.Attr<int>("axis"), x.size(), "axis", c.Where());
  const bool soft = c.Attr<bool>("soft_label");
  // A hard Label of rank Logits - 1 (class axis last) as cross_entropy takes
  // it: the fusion of softmax + cross_entropy must keep working for it.
  const bool short_label =
      !soft && x.size() >= 2 && label.size() + 1 == x.size() && axis == static_cast<int>(x.size()) - 1;
  NABLA_ENFORCE(label.size() == x.size() || short_label, kInvalidArgument, c.Where(),
                ": Label must have the rank of Logits (", x.size(),
                "; a hard Label may have one less when axis is the last), but received Label ", ShapeToString(label),
                " and Logits ", ShapeToString(x), " (axis ", axis, ")");
  for (size_t i = 0; i < label.size(); ++i) {
    const int64_t want = (static_cast<int>(i) == axis && !soft) ? 1 : x[i];
    NABLA_ENFORCE(DimsCompatible(label[i], want), kInvalidArgument, c.Where(),
                  soft ? ": with soft_label the Label must have the shape of Logits"
                       : ": a hard Label must match Logits except for size 1 on the class axis",
                  ", but received Label ", ShapeToString(label), " and Logits ", ShapeToString(x), " (axis ", axis,
                  ")");
  }
  if (soft)
    NABLA_ENFORCE(c.InputDType("Label") == c.InputDType("Logits"), kInvalidArgument, c.Where(),
                  ": with soft_label the Label must have the dtype of Logits (", DTypeName(c.InputDType("Logits")),
                  "), but received ", DTypeName(c.InputDType("Label")));
  else
    EnforceIndexDType(c.InputDType("Label"), c.Where(), "Label");
  c.ShareShapeAndDType("Logits", "Softmax");
  c.SetOutputShape("Loss", SoftmaxCrossEntropyLossShape(x, label, axis));
  c.SetOutputDType("Loss", c.InputDType("Logits"));
}

// Paddle's maker: the saved Softmax replaces Logits, and Softmax@GRAD is not
// read (the Softmax output is for inspection, not differentiated).
class SoftmaxWithCrossEntropyGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp("softmax_with_cross_entropy_grad",
                 {{"Label", Input("Label")}, {"Softmax", Output("Softmax")}, {GradVarName("Loss"), OutputGrad("Loss")}},
                 {{GradVarName("Logits"), InputGrad("Logits")}}, Attrs());
  }
};

}  // namespace

// The fusion pass (FuseOps) replaces softmax(X) -> P, cross_entropy(P, Label)
// -> Y by this op when P has no other reader: one kernel instead of two,
// log-sum-exp instead of log(softmax), and a gradient (Softmax - one_hot)
// that needs no division by P. Only the last axis: cross_entropy's classes
// are always there.
std::unique_ptr<OpDesc> FuseSoftmaxCrossEntropy(const std::vector<const OpDesc*>& m) {
  const OpDesc& softmax = *m[0];
  const OpDesc& ce = *m[1];
  if (!softmax.HasAttr("axis") || softmax.Attr<int>("axis") != -1) return nullptr;
  AttributeMap attrs{{"axis", -1}};
  for (const char* a : {"soft_label", "ignore_index"})
    if (ce.HasAttr(a)) attrs[a] = ce.GetAttr(a);
  return std::make_unique<OpDesc>(
      "softmax_with_cross_entropy", VarNameMap{{"Logits", softmax.Input("X")}, {"Label", ce.Input("Label")}},
      VarNameMap{{"Softmax", softmax.Output("Out")}, {"Loss", ce.Output("Y")}}, std::move(attrs));
}

NABLA_REGISTER_OPS(softmax_with_cross_entropy) {
  GradCheckSpec hard = CheckCase("hard_label", {CheckInput("Logits", {4, 5}, -2.0, 2.0), IndexIn("Label", {4, 1}, 5)},
                                 {}, {{"Softmax", 1}, {"Loss", 1}});
  hard.no_grad_outputs = {"Softmax"};
  GradCheckSpec ignored = hard;
  ignored.name = "ignore_index";
  ignored.inputs[1].values = {2, 0, 2, 4};
  ignored.attrs = {{"ignore_index", 2}};
  GradCheckSpec soft =
      CheckCase("soft_label", {CheckInput("Logits", {3, 4}, -2.0, 2.0), NoCheck(CheckInput("Label", {3, 4}, 0.0, 1.0))},
                {}, {{"Softmax", 1}, {"Loss", 1}});
  soft.no_grad_outputs = {"Softmax"};
  soft.attrs = {{"soft_label", true}};
  GradCheckSpec axis1 = CheckCase("axis1", {CheckInput("Logits", {2, 4, 3}, -2.0, 2.0), IndexIn("Label", {2, 1, 3}, 4)},
                                  {}, {{"Softmax", 1}, {"Loss", 1}});
  axis1.no_grad_outputs = {"Softmax"};
  axis1.attrs = {{"axis", 1}};
  GradCheckSpec probs =
      CheckCase("no_softmax_hard", {CheckInput("Logits", {3, 4}, 0.1, 1.0), IndexIn("Label", {3, 1}, 4)},
                {{"use_softmax", false}}, {{"Softmax", 1}, {"Loss", 1}});
  probs.no_grad_outputs = {"Softmax"};
  GradCheckSpec probs_soft = CheckCase(
      "no_softmax_soft", {CheckInput("Logits", {2, 3, 4}, 0.1, 1.0), NoCheck(CheckInput("Label", {2, 3, 4}, 0.0, 1.0))},
      {{"use_softmax", false}, {"soft_label", true}, {"axis", 1}}, {{"Softmax", 1}, {"Loss", 1}});
  probs_soft.no_grad_outputs = {"Softmax"};
  GradCheckSpec short_label =
      CheckCase("label_rank_minus_one", {CheckInput("Logits", {2, 3, 4}, -2.0, 2.0), IndexIn("Label", {2, 3}, 4)}, {},
                {{"Softmax", 1}, {"Loss", 1}});
  short_label.no_grad_outputs = {"Softmax"};
  registrar.Op("softmax_with_cross_entropy", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .Doc(
          "Softmax of Logits along `axis` fused with cross entropy against Label, computed through log-sum-exp: "
          "Loss = logsumexp(Logits) - Logits[Label] (hard) or sum(Label * (logsumexp(Logits) - Logits)) (soft).")
      .Input("Logits", "(Tensor) unnormalized scores, float32 or float64")
      .Input("Label",
             "(Tensor) hard: int64 class indices, the shape of Logits with 1 on `axis` (or without the last "
             "axis, when it is `axis`); soft: a distribution of Logits' shape and dtype")
      .Output("Softmax", "(Tensor) softmax of Logits along `axis`, shape of Logits (saved for the gradient)")
      .Output("Loss", "(Tensor) the loss, the shape of Logits with 1 on `axis` (a short hard Label's shape)")
      .Attr<bool>("soft_label", false, "(bool, default false) Label holds distributions instead of indices")
      .Attr<int>("ignore_index", -100,
                 "(int, default -100) positions whose hard label equals it get loss 0 and no gradient; unused "
                 "with soft_label")
      .Attr<int>("axis", -1, "(int, default -1) the class axis; negative counts from the end")
      .Attr<bool>("use_softmax", true,
                  "(bool, default true) apply softmax to Logits; false: Logits are probabilities already, Softmax "
                  "is a copy of them and Loss is cross_entropy's (-log(Logits[Label]), the log clipped at 1e-20)")
      .Attr<bool>("numeric_stable_mode", true,
                  "(bool, default true) Paddle's choice between its max-shifted softmax and a plain one; nabla "
                  "always shifts by the row's max (and computes the loss as logsumexp minus the logit), so both "
                  "values give the same results")
      .InferShape(InferSoftmaxWithCrossEntropy)
      .GradMaker<SoftmaxWithCrossEntropyGradMaker>()
      .GradCheck(hard)
      .GradCheck(ignored)
      .GradCheck(soft)
      .GradCheck(axis1)
      .GradCheck(probs)
      .GradCheck(probs_soft)
      .GradCheck(short_label)
      .Fuses(FusionPattern{{"softmax", "cross_entropy"}, FuseSoftmaxCrossEntropy});
  registrar.DefaultGradOp("softmax_with_cross_entropy", __FILE__, __LINE__)
      .Doc(
          "Gradient of softmax_with_cross_entropy with respect to Logits, from the saved Softmax: "
          "Loss@GRAD * (Softmax - one_hot(Label)); with use_softmax false, cross_entropy's gradient "
          "-Loss@GRAD * Label / Softmax (0 where Softmax <= 1e-20).")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "Softmax", GradVarName("Logits")); })
      .KernelDType(DTypeOfInput("Softmax"));
  RegisterFloatKernels(registrar, "softmax_with_cross_entropy", SoftmaxWithCrossEntropyKernel<float>,
                       SoftmaxWithCrossEntropyKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "softmax_with_cross_entropy_grad", SoftmaxWithCrossEntropyGradKernel<float>,
                       SoftmaxWithCrossEntropyGradKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
