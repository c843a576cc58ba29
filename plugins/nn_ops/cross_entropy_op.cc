// cross_entropy: Y = -log(X[label]) (hard) or -sum(Label * log(X)) (soft)
// over the last axis of probabilities X. The log is clipped, log(max(x,
// 1e-20)), so a zero probability gives a large finite loss; the gradient is
// the exact derivative of that clipped loss (0 where x <= 1e-20), unlike
// Paddle, whose -dY / x turns a zero probability into an infinite gradient.
#include <algorithm>
#include <cmath>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

// Paddle's Y: Label's shape, with the last dim set to 1 when Label has X's
// rank (a hard Label of rank X - 1 holds one index per row as it is).
Shape LossShape(const Shape& x, const Shape& label) {
  Shape y = label;
  if (y.size() == x.size()) y.back() = 1;
  return y;
}

template <typename T>
void CrossEntropyKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  const IndexReader label_at(label);
  Tensor* y = ctx.Output("Y");
  const int64_t d = x.GetShape().back();
  // The rows are the leading dims, not Numel / d: with d == 0 (no classes)
  // each row still gets its loss (0 soft, an out-of-range label hard).
  const int64_t rows = ProductOf(x.GetShape(), 0, x.GetShape().size() - 1);
  const T* px = x.Data<T>();
  T* py = y->Allocate<T>(ctx.GetDevice(), LossShape(x.GetShape(), label.GetShape()));
  if (ctx.Attr<bool>("soft_label")) {
    const T* pl = label.Data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      double loss = 0.0;
      for (int64_t j = 0; j < d; ++j) loss -= static_cast<double>(pl[r * d + j]) * ClippedLog(px[r * d + j]);
      py[r] = static_cast<T>(loss);
    }
    return;
  }
  const int ignore = ctx.Attr<int>("ignore_index");
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t l = label_at[r];
    if (l == ignore) {
      py[r] = T(0);
      continue;
    }
    NABLA_ENFORCE(l >= 0 && l < d, kOutOfRange, "Label[", r, "] must be in [0, ", d, ") or equal ignore_index ", ignore,
                  ", but received ", l);
    py[r] = -ClippedLog(px[r * d + l]);
  }
}

template <typename T>
void CrossEntropyGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  const IndexReader label_at(label);
  const Tensor& dy = ctx.Input(GradVarName("Y"));
  const int64_t d = x.GetShape().back();
  const int64_t rows = x.Numel() / std::max<int64_t>(d, 1);
  const T* px = x.Data<T>();
  const T* pdy = dy.Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
  if (ctx.Attr<bool>("soft_label")) {
    const T* pl = label.Data<T>();
    for (int64_t k = 0; k < rows * d; ++k) pdx[k] = pdy[k / d] * pl[k] * ClippedLogGrad(px[k]);
    return;
  }
  std::fill(pdx, pdx + rows * d, T(0));
  const int ignore = ctx.Attr<int>("ignore_index");
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t l = label_at[r];
    if (l == ignore) continue;
    NABLA_ENFORCE(l >= 0 && l < d, kOutOfRange, "Label[", r, "] must be in [0, ", d, ") or equal ignore_index ", ignore,
                  ", but received ", l);
    pdx[r * d + l] = pdy[r] * ClippedLogGrad(px[r * d + l]);
  }
}

void InferCrossEntropy(InferShapeContext& c) {
  const Shape x = c.InputShape("X");
  const Shape label = c.InputShape("Label");
  const bool soft = c.Attr<bool>("soft_label");
  NABLA_ENFORCE(!x.empty(), kInvalidArgument, c.Where(), ": input X must have rank >= 1, but received shape ",
                ShapeToString(x));
  EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
  // Paddle's rule: a hard Label has X's rank with last dim 1, or rank X - 1.
  const bool short_label = !soft && x.size() >= 2 && label.size() + 1 == x.size();
  NABLA_ENFORCE(
      label.size() == x.size() || short_label, kInvalidArgument, c.Where(),
      soft ? ": with soft_label the Label must have the rank of X (" : ": a hard Label must have the rank of X (",
      x.size(), soft ? ")" : ") or one less", ", but received Label ", ShapeToString(label), " and X ",
      ShapeToString(x));
  for (size_t i = 0; i + 1 < x.size(); ++i)
    NABLA_ENFORCE(DimsCompatible(x[i], label[i]), kInvalidArgument, c.Where(),
                  ": Label must match X on every axis but the last, but received Label ", ShapeToString(label),
                  " and X ", ShapeToString(x));
  if (soft) {
    NABLA_ENFORCE(DimsCompatible(label.back(), x.back()), kInvalidArgument, c.Where(),
                  ": with soft_label the Label must have the shape of X, but received Label ", ShapeToString(label),
                  " and X ", ShapeToString(x));
    NABLA_ENFORCE(c.InputDType("Label") == c.InputDType("X"), kInvalidArgument, c.Where(),
                  ": with soft_label the Label must have the dtype of X (", DTypeName(c.InputDType("X")),
                  "), but received ", DTypeName(c.InputDType("Label")));
  } else {
    NABLA_ENFORCE(short_label || DimsCompatible(label.back(), 1), kInvalidArgument, c.Where(),
                  ": a hard Label of X's rank must have last dim 1 (class indices), but received Label ",
                  ShapeToString(label));
    EnforceIndexDType(c.InputDType("Label"), c.Where(), "Label");
  }
  c.SetOutputShape("Y", LossShape(x, label));
  c.SetOutputDType("Y", c.InputDType("X"));
}

class CrossEntropyGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp("cross_entropy_grad",
                 {{"X", Input("X")}, {"Label", Input("Label")}, {GradVarName("Y"), OutputGrad("Y")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

}  // namespace

NABLA_REGISTER_OPS(cross_entropy) {
  GradCheckSpec hard =
      CheckCase("hard_label", {CheckInput("X", {4, 5}, 0.1, 1.0), IndexIn("Label", {4, 1}, 5)}, {}, {{"Y", 1}});
  GradCheckSpec ignored = hard;
  ignored.name = "ignore_index";
  ignored.inputs[1].values = {0, 3, 3, 4};
  ignored.attrs = {{"ignore_index", 3}};
  GradCheckSpec short_label = CheckCase(
      "label_rank_minus_one", {CheckInput("X", {2, 3, 4}, 0.1, 1.0), IndexIn("Label", {2, 3}, 4)}, {}, {{"Y", 1}});
  GradCheckSpec soft =
      CheckCase("soft_label", {CheckInput("X", {2, 3, 4}, 0.1, 1.0), NoCheck(CheckInput("Label", {2, 3, 4}, 0.0, 1.0))},
                {{"soft_label", true}}, {{"Y", 1}});
  registrar.Op("cross_entropy", __FILE__, __LINE__)
      .Precision(OpPrecision::kFloat32)
      .Doc(
          "Cross entropy of probabilities X against Label along the last axis: Y = -log(X[Label]) with hard "
          "labels, Y = -sum(Label * log(X)) with soft labels. The log is clipped at 1e-20.")
      .Input("X", "(Tensor) probabilities, shape [..., D], float32 or float64")
      .Input("Label",
             "(Tensor) hard: int64 class indices of shape [..., 1] or [...] (X's rank less one); soft: a "
             "distribution of X's shape and dtype")
      .Output("Y",
              "(Tensor) the loss per row, Label's shape with the last dim 1 ([..., 1]; [...] for a Label of "
              "rank X - 1), dtype of X")
      .Attr<bool>("soft_label", false, "(bool, default false) Label holds distributions instead of indices")
      .Attr<int>("ignore_index", -100,
                 "(int, default -100) rows whose hard label equals it get loss 0 and no gradient; unused with "
                 "soft_label")
      .InferShape(InferCrossEntropy)
      .GradMaker<CrossEntropyGradMaker>()
      .GradCheck(hard)
      .GradCheck(ignored)
      .GradCheck(short_label)
      .GradCheck(soft);
  registrar.DefaultGradOp("cross_entropy", __FILE__, __LINE__)
      .Doc("Gradient of cross_entropy with respect to X (Label gets none): -Y@GRAD * Label / X where X > 1e-20.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "X", GradVarName("X")); })
      .KernelDType(DTypeOfInput("X"));
  RegisterFloatKernels(registrar, "cross_entropy", CrossEntropyKernel<float>, CrossEntropyKernel<double>, __FILE__,
                       __LINE__);
  RegisterFloatKernels(registrar, "cross_entropy_grad", CrossEntropyGradKernel<float>, CrossEntropyGradKernel<double>,
                       __FILE__, __LINE__);
}

}  // namespace nabla::nn
