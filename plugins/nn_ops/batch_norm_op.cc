// batch_norm: per-channel normalization of X [N, C, ...] (NCHW). Training
// normalizes with the batch's mean and biased variance and moves the
// running statistics: MeanOut = momentum * Mean + (1 - momentum) * batch
// mean, VarianceOut likewise with the biased batch variance. MeanOut and
// VarianceOut are normally the same vars as Mean and Variance (updated in
// place, as Paddle). With is_test or use_global_stats, Mean and Variance
// normalize and the running statistics stay as they are. SavedMean and
// SavedVariance hold what normalized X for the gradient: the mean and, as
// in Paddle, the inverse standard deviation 1 / sqrt(var + epsilon).
#include <algorithm>
#include <cmath>

#include "batch_norm.h"
#include "conv_util.h"
#include "nabla/plugin.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

// X seen as [n, c, inner]: statistics run over n and inner for each c.
// NHWC (channels last) is [all other dims, c, 1].
struct BnView {
  int64_t n, c, inner;
};

BnView ViewOf(const Shape& x, bool nhwc) {
  if (nhwc) return {ProductOf(x, 0, x.size() - 1), x.back(), 1};
  return {x[0], x[1], ProductOf(x, 2, x.size())};
}

bool ChannelsLast(const OpDesc& op, const std::string& where) {
  return IsNHWC(op.Attr<std::string>("data_layout"), "data_layout", where);
}

// Row sums in 8 independent lanes of T, so the loop vectorizes (a single
// accumulator is a chain of dependent adds); rows are short (H * W), and
// the caller adds the row sums in double.
template <typename T, typename F>
double LaneSum(int64_t n, F&& term) {
  T acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) acc[k] += term(j + k);
  double s = 0.0;
  for (; j < n; ++j) s += term(j);
  for (T a : acc) s += a;
  return s;
}

// One row's part of batch_norm_grad's sums: *sum_dy += sum(g) and
// *sum_dy_xm += sum(g * (x - m)), g = dy (with kRelu relu_grad's: dy where
// o > 0, else 0). The terms go through a buffer a chunk at a time, and each
// sum adds term j in lane j % 8, the last n % 8 terms then the lanes: with
// the select inside the lane sums GCC branched on the mask instead of
// vectorizing, and sharing one function keeps batch_norm and
// fused_batch_norm_act adding the same rounded terms in the same order.
template <typename T, bool kRelu>
void GradSums(int64_t n, const T* o, const T* dy, const T* x, T m, double* sum_dy, double* sum_dy_xm) {
  constexpr int64_t kChunk = 256;
  static_assert(kChunk % 8 == 0, "a chunk starts at lane 0");
  T g[kChunk], gx[kChunk];
  T a[8] = {}, b[8] = {};
  auto terms = [&](int64_t at, int64_t len) {
    for (int64_t j = 0; j < len; ++j) {
      const T d = dy[at + j];
      if constexpr (kRelu) {
        g[j] = o[at + j] > T(0) ? d : T(0);
      } else {
        g[j] = d;
      }
      gx[j] = g[j] * (x[at + j] - m);
    }
  };
  const int64_t full = n / 8 * 8;
  for (int64_t at = 0; at < full; at += kChunk) {
    const int64_t len = std::min(kChunk, full - at);
    terms(at, len);
    for (int64_t j = 0; j < len; j += 8)
      for (int k = 0; k < 8; ++k) {
        a[k] += g[j + k];
        b[k] += gx[j + k];
      }
  }
  double sa = 0.0, sb = 0.0;
  terms(full, n - full);
  for (int64_t j = 0; j < n - full; ++j) {
    sa += g[j];
    sb += gx[j];
  }
  for (int k = 0; k < 8; ++k) {
    sa += a[k];
    sb += b[k];
  }
  *sum_dy += sa;
  *sum_dy_xm += sb;
}

bool UsesGlobalStats(const ExecutionContext& ctx) {
  return ctx.Attr<bool>("is_test") || ctx.Attr<bool>("use_global_stats");
}

}  // namespace

template <typename T, bool kRelu>
void BatchNormKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const BnView v = ViewOf(x.GetShape(), ChannelsLast(ctx.Op(), "op '" + ctx.Op().Type() + "'"));
  const T* px = x.Data<T>();
  const T* scale = ctx.Input("Scale").Data<T>();
  const T* bias = ctx.Input("Bias").Data<T>();
  // Read the running statistics before any output is written: MeanOut and
  // VarianceOut usually alias them.
  const std::vector<double> run_mean(ctx.Input("Mean").Data<T>(), ctx.Input("Mean").Data<T>() + v.c);
  const std::vector<double> run_var(ctx.Input("Variance").Data<T>(), ctx.Input("Variance").Data<T>() + v.c);
  const double eps = ctx.Attr<float>("epsilon");
  const double momentum = BatchNormMomentum(ctx);
  // An empty batch has no statistics: it leaves the running ones as they are.
  const bool global = UsesGlobalStats(ctx) || v.n * v.inner == 0;
  T* py = ctx.Output("Y")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  T* mean_out = ctx.Output("MeanOut")->Allocate<T>(ctx.GetDevice(), {v.c});
  T* var_out = ctx.Output("VarianceOut")->Allocate<T>(ctx.GetDevice(), {v.c});
  T* saved_mean = ctx.Output("SavedMean")->Allocate<T>(ctx.GetDevice(), {v.c});
  T* saved_inv_std = ctx.Output("SavedVariance")->Allocate<T>(ctx.GetDevice(), {v.c});
  const double count = static_cast<double>(v.n * v.inner);
  cpu::ParallelFor(v.c, cpu::GrainForRows(v.n * v.inner), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      double mean = run_mean[c], var = run_var[c];
      if (!global) {
        // Two passes: E[x^2] - E[x]^2 cancels badly.
        double sum = 0.0;
        for (int64_t i = 0; i < v.n; ++i) {
          const T* p = px + (i * v.c + c) * v.inner;
          sum += LaneSum<T>(v.inner, [p](int64_t j) { return p[j]; });
        }
        mean = sum / count;
        const T m = static_cast<T>(mean);
        double sq = 0.0;
        for (int64_t i = 0; i < v.n; ++i) {
          const T* p = px + (i * v.c + c) * v.inner;
          sq += LaneSum<T>(v.inner, [p, m](int64_t j) { return (p[j] - m) * (p[j] - m); });
        }
        var = sq / count;
      }
      const double inv_std = 1.0 / std::sqrt(var + eps);
      const T a = static_cast<T>(inv_std * scale[c]);
      const T shift = static_cast<T>(bias[c] - mean * inv_std * scale[c]);
      for (int64_t i = 0; i < v.n; ++i) {
        const T* p = px + (i * v.c + c) * v.inner;
        T* q = py + (i * v.c + c) * v.inner;
        if constexpr (kRelu) {
          for (int64_t j = 0; j < v.inner; ++j) {
            const T y = p[j] * a + shift;
            q[j] = y < T(0) ? T(0) : y;  // NaN stays NaN, as relu keeps it
          }
        } else {
          for (int64_t j = 0; j < v.inner; ++j) q[j] = p[j] * a + shift;
        }
      }
      if (global) {
        mean_out[c] = static_cast<T>(run_mean[c]);
        var_out[c] = static_cast<T>(run_var[c]);
      } else {
        mean_out[c] = static_cast<T>(momentum * run_mean[c] + (1.0 - momentum) * mean);
        var_out[c] = static_cast<T>(momentum * run_var[c] + (1.0 - momentum) * var);
      }
      saved_mean[c] = static_cast<T>(mean);
      saved_inv_std[c] = static_cast<T>(inv_std);
    }
  });
}

// With xhat = (x - mean) * inv_std and m = N * inner:
//   dBias = sum(dY), dScale = sum(dY * xhat),
//   training: dX = Scale * inv_std / m * (m * dY - dBias - xhat * dScale),
//   global statistics (constants): dX = Scale * inv_std * dY.
// With kRelu, dY is relu_grad's: Y@GRAD where the (relu'd) Y > 0, else 0,
// taken element by element as the passes read it.
template <typename T, bool kRelu>
void BatchNormGradKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const BnView v = ViewOf(x.GetShape(), ChannelsLast(ctx.Op(), "op '" + ctx.Op().Type() + "'"));
  const T* px = x.Data<T>();
  const T* pdy = ctx.Input(GradVarName("Y")).Data<T>();
  const T* pout = kRelu ? ctx.Input("Y").Data<T>() : nullptr;
  const T* scale = ctx.Input("Scale").Data<T>();
  const T* saved_mean = ctx.Input("SavedMean").Data<T>();
  const T* saved_inv_std = ctx.Input("SavedVariance").Data<T>();
  const bool global = UsesGlobalStats(ctx);
  Tensor* dx_t = ctx.Output(GradVarName("X"));
  Tensor* dscale_t = ctx.Output(GradVarName("Scale"));
  Tensor* dbias_t = ctx.Output(GradVarName("Bias"));
  T* pdx = dx_t ? dx_t->Allocate<T>(ctx.GetDevice(), x.GetShape()) : nullptr;
  T* pdscale = dscale_t ? dscale_t->Allocate<T>(ctx.GetDevice(), {v.c}) : nullptr;
  T* pdbias = dbias_t ? dbias_t->Allocate<T>(ctx.GetDevice(), {v.c}) : nullptr;
  const double count = static_cast<double>(v.n * v.inner);
  cpu::ParallelFor(v.c, cpu::GrainForRows(v.n * v.inner), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const double mean = saved_mean[c], inv_std = saved_inv_std[c];
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      const T m = static_cast<T>(mean);
      for (int64_t i = 0; i < v.n; ++i) {
        const int64_t at = (i * v.c + c) * v.inner;
        const T* p = px + at;
        const T* d = pdy + at;
        GradSums<T, kRelu>(v.inner, kRelu ? pout + at : nullptr, d, p, m, &sum_dy, &sum_dy_xhat);
      }
      sum_dy_xhat *= inv_std;
      if (pdbias) pdbias[c] = static_cast<T>(sum_dy);
      if (pdscale) pdscale[c] = static_cast<T>(sum_dy_xhat);
      if (!pdx) continue;
      const double k = scale[c] * inv_std;
      // dX = a * dY + b * x + shift, with the training terms folded in.
      const double bx_d = global ? 0.0 : -k * inv_std * sum_dy_xhat / count;
      const T a = static_cast<T>(k), bx = static_cast<T>(bx_d);
      const T shift = static_cast<T>(global ? 0.0 : -k * sum_dy / count - bx_d * mean);
      for (int64_t i = 0; i < v.n; ++i) {
        const T* p = px + (i * v.c + c) * v.inner;
        const T* d = pdy + (i * v.c + c) * v.inner;
        T* q = pdx + (i * v.c + c) * v.inner;
        if constexpr (kRelu) {
          const T* o = pout + (i * v.c + c) * v.inner;
          for (int64_t j = 0; j < v.inner; ++j) {  // d[j] loaded either way, so the loop vectorizes
            const T dj = d[j];
            q[j] = a * (o[j] > T(0) ? dj : T(0)) + bx * p[j] + shift;
          }
        } else {
          for (int64_t j = 0; j < v.inner; ++j) q[j] = a * d[j] + bx * p[j] + shift;
        }
      }
    }
  });
}

template void BatchNormKernel<float, false>(const ExecutionContext&);
template void BatchNormKernel<double, false>(const ExecutionContext&);
template void BatchNormKernel<float, true>(const ExecutionContext&);
template void BatchNormKernel<double, true>(const ExecutionContext&);
template void BatchNormGradKernel<float, false>(const ExecutionContext&);
template void BatchNormGradKernel<double, false>(const ExecutionContext&);
template void BatchNormGradKernel<float, true>(const ExecutionContext&);
template void BatchNormGradKernel<double, true>(const ExecutionContext&);

void InferBatchNorm(InferShapeContext& c) {
  const Shape x = c.InputShape("X");
  const DType dtype = c.InputDType("X");
  EnforceFloatDType(dtype, c.Where(), "X");
  NABLA_ENFORCE(x.size() >= 2 && x.size() <= 5, kInvalidArgument, c.Where(),
                ": X must have rank 2 to 5 ([N, C, ...]), but received shape ", ShapeToString(x));
  const bool nhwc = ChannelsLast(c.Op(), c.Where());
  const int64_t channels = nhwc ? x.back() : x[1];
  for (const char* slot : {"Scale", "Bias", "Mean", "Variance"}) {
    const Shape s = c.InputShape(slot);
    NABLA_ENFORCE(s.size() == 1 && DimsCompatible(s[0], channels), kInvalidArgument, c.Where(), ": ", slot,
                  " must have shape [", channels, "] (X's channels, dim ", nhwc ? "-1" : "1", " of ", ShapeToString(x),
                  "), but received ", ShapeToString(s));
    NABLA_ENFORCE(c.InputDType(slot) == dtype, kInvalidArgument, c.Where(), ": ", slot, " must have X's dtype ",
                  DTypeName(dtype), ", but received ", DTypeName(c.InputDType(slot)));
  }
  c.ShareShapeAndDType("X", "Y");
  for (const char* slot : {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"}) {
    c.SetOutputShape(slot, {channels});
    c.SetOutputDType(slot, dtype);
  }
}

std::vector<std::unique_ptr<OpDesc>> BatchNormGradMaker::operator()() const {
  VarNameMap inputs{{"X", Input("X")},
                    {"Scale", Input("Scale")},
                    {"Bias", Input("Bias")},  // for Bias@GRAD's shape only
                    {"SavedMean", Output("SavedMean")},
                    {"SavedVariance", Output("SavedVariance")},
                    {GradVarName("Y"), OutputGrad("Y")}};
  if (ForwardOp().Type() != "batch_norm") inputs["Y"] = Output("Y");  // the activation's mask
  return OneOp(ForwardOp().Type() + "_grad", std::move(inputs),
               {{GradVarName("X"), InputGrad("X")},
                {GradVarName("Scale"), InputGrad("Scale")},
                {GradVarName("Bias"), InputGrad("Bias")}},
               Attrs());
}

GradCheckSpec BnCase(std::string name, Shape x, AttributeMap attrs) {
  GradCheckSpec s;
  s.name = std::move(name);
  const bool nhwc = attrs.count("data_layout") && std::get<std::string>(attrs.at("data_layout")) == "NHWC";
  const int64_t c = nhwc ? x.back() : x[1];
  s.inputs = {CheckInput("X", x, -2.0, 2.0), CheckInput("Scale", {c}, 0.5, 1.5), CheckInput("Bias", {c}),
              NoCheck(CheckInput("Mean", {c})), NoCheck(CheckInput("Variance", {c}, 0.5, 2.0))};
  s.outputs = {{"Y", 1}, {"MeanOut", 1}, {"VarianceOut", 1}, {"SavedMean", 1}, {"SavedVariance", 1}};
  s.no_grad_outputs = {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"};
  s.attrs = std::move(attrs);
  return s;
}

OpBuilder& BatchNormSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                           const std::string& y_doc, const char* file, int line) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Precision(OpPrecision::kFloat32)
          .Doc(doc)
          .Input("X", "(Tensor) [N, C] or [N, C, ...], float32 or float64")
          .Input("Scale", "(Tensor) per-channel scale, [C]")
          .Input("Bias", "(Tensor) per-channel shift, [C]")
          .Input("Mean", "(Tensor) running mean, [C]")
          .Input("Variance", "(Tensor) running (biased) variance, [C]")
          .Input("MomentumTensor",
                 "(Tensor<float32|float64>, optional) one element: momentum at run time; before attribute momentum",
                 kTensorAttrInput)
          .Output("Y", y_doc)
          .Output("MeanOut", "(Tensor) updated running mean; the same var as Mean")
          .Output("VarianceOut", "(Tensor) updated running variance; the same var as Variance")
          .Output("SavedMean", "(Tensor) the mean that normalized X, [C]; the gradient reads it")
          .Output("SavedVariance",
                  "(Tensor) 1 / sqrt(variance + epsilon) that normalized X, [C]; the gradient reads it")
          .Attr<float>("epsilon", 1e-5f, "(float, default 1e-5) added to the variance before the square root",
                       [](const float& e) {
                         NABLA_ENFORCE(e >= 0.0f, kInvalidArgument, "attribute epsilon must be >= 0, but received ", e);
                       })
          .Attr<float>("momentum", 0.9f, "(float, default 0.9) weight of the old running statistics in the update",
                       [](const float& m) {
                         NABLA_ENFORCE(m >= 0.0f && m <= 1.0f, kInvalidArgument,
                                       "attribute momentum must be in [0, 1], but received ", m);
                       })
          .Attr<bool>("is_test", false, "(bool, default false) inference: normalize with Mean and Variance")
          .Attr<bool>("use_global_stats", false,
                      "(bool, default false) normalize with Mean and Variance in training too (frozen statistics)")
          .Attr<std::string>("data_layout", "NCHW",
                             "(string, default \"NCHW\") layout of X: NCHW (channels in dim 1) or NHWC (channels last)")
          .InferShape(InferBatchNorm)
          .UpdatesInPlace()  // MeanOut and VarianceOut are Mean and Variance
          .GradMaker<BatchNormGradMaker>();
  return b;
}

void BatchNormGradSchema(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                         int line) {
  OpBuilder& grad = registrar.DefaultGradOp(type, file, line);
  grad.Doc(doc)
      .InferShape([](InferShapeContext& c) {
        InferSameAs(c, "X", GradVarName("X"));
        InferSameAs(c, "Scale", GradVarName("Scale"));
        InferSameAs(c, "Bias", GradVarName("Bias"));
      })
      .KernelDType(DTypeOfInput(GradVarName("Y")));
  grad.NoBufferInput("Bias");
}

NABLA_REGISTER_OPS(batch_norm) {
  BatchNormSchema(registrar, "batch_norm",
                  "Batch normalization over the channel dim 1 of X [N, C, ...]: Y = (X - mean) / sqrt(var + "
                  "epsilon) * Scale + Bias, with the batch's statistics in training (moving Mean and Variance into "
                  "MeanOut and VarianceOut) and the running ones with is_test or use_global_stats.",
                  "(Tensor) the normalized X, X's shape and dtype", __FILE__, __LINE__)
      .GradCheck(BnCase("train_nchw", {3, 2, 3, 2}, {}))
      .GradCheck(BnCase("train_2d", {5, 3}, {{"momentum", 0.5f}}))
      .GradCheck(BnCase("train_nhwc", {2, 3, 2, 4}, {{"data_layout", std::string("NHWC")}}))
      .GradCheck(BnCase("global_stats", {2, 3, 2, 2}, {{"use_global_stats", true}}));
  BatchNormGradSchema(registrar, "batch_norm",
                      "Gradient of batch_norm with respect to X, Scale and Bias, from SavedMean and SavedVariance.",
                      __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "batch_norm", BatchNormKernel<float, false>, BatchNormKernel<double, false>, __FILE__,
                       __LINE__);
  RegisterFloatKernels(registrar, "batch_norm_grad", BatchNormGradKernel<float, false>,
                       BatchNormGradKernel<double, false>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
