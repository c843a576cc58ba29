// conv2d: 2-D convolution (cross-correlation, as every framework) of an NCHW
// Input with a Filter [M, C / groups, kh, kw], with Paddle's strides,
// paddings (2 or 4 values), dilations, groups and padding_algorithm. There
// is no bias: a program adds one with elementwise_add (axis 1), as Paddle.
// float32 runs on oneDNN where the plugin was built with it (dnnl_glue.h);
// float64, and float32 without oneDNN, run im2col + GEMM, the reference.
#include <type_traits>

#include "conv_util.h"
#include "dnnl_glue.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

void InferConv2d(InferShapeContext& c) {
  const Shape in = c.InputShape("Input");
  const Shape filter = c.InputShape("Filter");
  const DType dtype = c.InputDType("Input");
  EnforceFloatDType(dtype, c.Where(), "Input");
  NABLA_ENFORCE(c.InputDType("Filter") == dtype, kInvalidArgument, c.Where(), ": Filter must have Input's dtype ",
                DTypeName(dtype), ", but received ", DTypeName(c.InputDType("Filter")));
  NABLA_ENFORCE(in.size() == 4, kInvalidArgument, c.Where(), ": Input must be 4-D [N, C, H, W], but received shape ",
                ShapeToString(in));
  NABLA_ENFORCE(filter.size() == 4, kInvalidArgument, c.Where(),
                ": Filter must be 4-D [M, C / groups, kh, kw], but received shape ", ShapeToString(filter));
  const bool nhwc = IsNHWC(c.Attr<std::string>("data_format"), "data_format", c.Where());
  const int groups = c.Attr<int>("groups");
  NABLA_ENFORCE(groups >= 1, kInvalidArgument, c.Where(), ": attribute groups must be >= 1, but received ", groups);
  NABLA_ENFORCE(filter[0] != 0 && filter[1] != 0 && filter[2] > 0 && filter[3] > 0, kInvalidArgument, c.Where(),
                ": Filter's dims must be positive, its kernel size (dims 2 and 3) known at build time, but received "
                "shape ",
                ShapeToString(filter));
  const Shape nchw = nhwc ? NchwShapeOf(in) : in;
  NABLA_ENFORCE(nchw[1] < 0 || filter[1] < 0 || nchw[1] == filter[1] * groups, kInvalidArgument, c.Where(),
                ": Input's channels (", nchw[1], ") must equal Filter's dim 1 (", filter[1], ") times groups (", groups,
                "), for Input ", ShapeToString(in), " and Filter ", ShapeToString(filter));
  NABLA_ENFORCE(filter[0] < 0 || filter[0] % groups == 0, kInvalidArgument, c.Where(),
                ": Filter's output channels (dim 0) must be divisible by groups (", groups, "), but received shape ",
                ShapeToString(filter));
  ConvGeom g = MakeConvGeom(c, nchw, filter, c.Where());
  const Shape out{in[0], filter[0], g.h.out, g.w.out};
  c.SetOutputShape("Output", nhwc ? NhwcShapeOf(out) : out);
  c.SetOutputDType("Output", dtype);
}

// Parallel over images, each one im2col and one GEMM per group.
template <typename T>
void ConvForwardGemm(const ConvGeom& g, const T* x, const T* w, T* y) {
  const int64_t cg = g.CinPerGroup(), mg = g.CoutPerGroup(), k = g.ColRows(), plane = g.OutPlane();
  cpu::ParallelFor(g.n, cpu::GrainForRows(g.m * plane * k), [&](int64_t b, int64_t e) {
    std::vector<T> col(static_cast<size_t>(k * plane));
    for (int64_t n = b; n < e; ++n)
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        Im2Col(x + (n * g.c + gi * cg) * g.h.in * g.w.in, cg, g.h, g.w, col.data());
        cpu::Gemm(false, false, mg, plane, k, T(1), w + gi * mg * k, k, col.data(), plane, T(0),
                  y + (n * g.m + gi * mg) * plane, plane);
      }
  });
}

// dX = col2im(W^T dY) per image (parallel over images); dW = sum over
// images of dY im2col(X)^T, accumulated in image order so the result does
// not depend on the thread count.
template <typename T>
void ConvBackwardGemm(const ConvGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw) {
  const int64_t cg = g.CinPerGroup(), mg = g.CoutPerGroup(), k = g.ColRows(), plane = g.OutPlane();
  const int64_t in_image = g.c * g.h.in * g.w.in;
  if (dx) {
    cpu::ParallelFor(g.n, cpu::GrainForRows(g.m * plane * k), [&](int64_t b, int64_t e) {
      std::vector<T> col(static_cast<size_t>(k * plane));
      for (int64_t n = b; n < e; ++n) {
        std::fill(dx + n * in_image, dx + (n + 1) * in_image, T(0));
        for (int64_t gi = 0; gi < g.groups; ++gi) {
          cpu::Gemm(true, false, k, plane, mg, T(1), w + gi * mg * k, k, dy + (n * g.m + gi * mg) * plane, plane, T(0),
                    col.data(), plane);
          Col2ImAdd(col.data(), cg, g.h, g.w, dx + (n * g.c + gi * cg) * g.h.in * g.w.in);
        }
      }
    });
  }
  if (dw) {
    std::vector<T> col(static_cast<size_t>(k * plane));
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        Im2Col(x + (n * g.c + gi * cg) * g.h.in * g.w.in, cg, g.h, g.w, col.data());
        cpu::Gemm(false, true, mg, k, plane, T(1), dy + (n * g.m + gi * mg) * plane, plane, col.data(), plane,
                  n == 0 ? T(0) : T(1), dw + gi * mg * k, k);
      }
    if (g.n == 0) std::fill(dw, dw + g.m * k, T(0));
  }
}

template <typename T>
void ConvForward(const ConvGeom& g, const T* x, const T* w, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (DnnlConvForward(g, x, w, y)) return;
  }
  ConvForwardGemm<T>(g, x, w, y);
}

template <typename T>
void ConvBackward(const ConvGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw) {
  if constexpr (std::is_same_v<T, float>) {
    if (DnnlConvBackward(g, x, w, dy, dx, dw)) return;
  }
  ConvBackwardGemm<T>(g, x, w, dy, dx, dw);
}

template <typename T>
void Conv2dKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& w = ctx.Input("Filter");
  const bool nhwc = IsNHWC(ctx.Attr<std::string>("data_format"), "data_format", "op 'conv2d'");
  const ConvGeom g = MakeConvGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d'");
  const Shape ys{g.n, g.m, g.h.out, g.w.out};
  T* y = ctx.Output("Output")->Allocate<T>(ctx.GetDevice(), nhwc ? NhwcShapeOf(ys) : ys);
  std::vector<T> xbuf, ybuf(nhwc ? static_cast<size_t>(NumElements(ys)) : 0);
  ConvForward<T>(g, AsNchw(x.Data<T>(), nhwc, g.n, g.c, g.h.in * g.w.in, xbuf), w.Data<T>(), nhwc ? ybuf.data() : y);
  if (nhwc) TransposeChannels(ybuf.data(), y, g.n, g.m, g.OutPlane(), false);
}

template <typename T>
void Conv2dGradKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& w = ctx.Input("Filter");
  const bool nhwc = IsNHWC(ctx.Attr<std::string>("data_format"), "data_format", "op 'conv2d_grad'");
  const ConvGeom g =
      MakeConvGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d_grad'");
  Tensor* dx_t = ctx.Output(GradVarName("Input"));
  Tensor* dw_t = ctx.Output(GradVarName("Filter"));
  T* dx = dx_t ? dx_t->Allocate<T>(ctx.GetDevice(), x.GetShape()) : nullptr;
  T* dw = dw_t ? dw_t->Allocate<T>(ctx.GetDevice(), w.GetShape()) : nullptr;
  std::vector<T> xbuf, dybuf, dxbuf(nhwc && dx ? static_cast<size_t>(x.Numel()) : 0);
  const T* px = AsNchw(x.Data<T>(), nhwc, g.n, g.c, g.h.in * g.w.in, xbuf);
  const T* pdy = AsNchw(ctx.Input(GradVarName("Output")).Data<T>(), nhwc, g.n, g.m, g.OutPlane(), dybuf);
  ConvBackward<T>(g, px, w.Data<T>(), pdy, nhwc && dx ? dxbuf.data() : dx, dw);
  if (nhwc && dx) TransposeChannels(dxbuf.data(), dx, g.n, g.c, g.h.in * g.w.in, false);
}

// bfloat16 (mixed precision, nabla/mixed_precision.h): oneDNN with float32
// accumulation on NCHW; other layouts, or a build without oneDNN, run the
// float32 path between conversions. Results are rounded to bfloat16, the
// gradients with force_fp32_output written in float32 as they are.
std::vector<float> Widen(const Tensor& t) {
  std::vector<float> f(static_cast<size_t>(t.Numel()));
  cpu::ConvertFromBf16(t.Data<bfloat16>(), f.data(), t.Numel());
  return f;
}

// Allocates `t` in the op's output dtype and stores the float32 `f` there.
void StoreResult(const ExecutionContext& ctx, Tensor* t, const Shape& shape, const std::vector<float>& f) {
  if (ForcesFp32Output(ctx))
    std::copy(f.begin(), f.end(), t->Allocate<float>(ctx.GetDevice(), shape));
  else
    cpu::ConvertToBf16(f.data(), t->Allocate<bfloat16>(ctx.GetDevice(), shape), NumElements(shape));
}

void Conv2dBf16Kernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& w = ctx.Input("Filter");
  const bool nhwc = IsNHWC(ctx.Attr<std::string>("data_format"), "data_format", "op 'conv2d'");
  const ConvGeom g = MakeConvGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d'");
  const Shape ys{g.n, g.m, g.h.out, g.w.out};
  bfloat16* y = ctx.Output("Output")->Allocate<bfloat16>(ctx.GetDevice(), nhwc ? NhwcShapeOf(ys) : ys);
  if (!nhwc && DnnlConvForward(g, x.Data<bfloat16>(), w.Data<bfloat16>(), y)) return;
  const std::vector<float> xf = Widen(x), wf = Widen(w);
  std::vector<float> xbuf, yf(static_cast<size_t>(NumElements(ys))), ybuf(nhwc ? yf.size() : 0);
  ConvForward<float>(g, AsNchw(xf.data(), nhwc, g.n, g.c, g.h.in * g.w.in, xbuf), wf.data(),
                     nhwc ? ybuf.data() : yf.data());
  if (nhwc) TransposeChannels(ybuf.data(), yf.data(), g.n, g.m, g.OutPlane(), false);
  cpu::ConvertToBf16(yf.data(), y, NumElements(ys));
}

void Conv2dGradBf16Kernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& w = ctx.Input("Filter");
  const Tensor& dy_t = ctx.Input(GradVarName("Output"));
  const bool nhwc = IsNHWC(ctx.Attr<std::string>("data_format"), "data_format", "op 'conv2d_grad'");
  const ConvGeom g =
      MakeConvGeom(ctx, nhwc ? NchwShapeOf(x.GetShape()) : x.GetShape(), w.GetShape(), "op 'conv2d_grad'");
  Tensor* dx_t = ctx.Output(GradVarName("Input"));
  Tensor* dw_t = ctx.Output(GradVarName("Filter"));
  if (!nhwc) {
    const bfloat16 *xb = x.Data<bfloat16>(), *wb = w.Data<bfloat16>(), *dyb = dy_t.Data<bfloat16>();
    auto run = [&](auto tag) {
      using Out = typename decltype(tag)::type;
      Out* dx = dx_t ? dx_t->Allocate<Out>(ctx.GetDevice(), x.GetShape()) : nullptr;
      Out* dw = dw_t ? dw_t->Allocate<Out>(ctx.GetDevice(), w.GetShape()) : nullptr;
      return DnnlConvBackward(g, xb, wb, dyb, dx, dw);
    };
    if (ForcesFp32Output(ctx) ? run(TypeTag<float>{}) : run(TypeTag<bfloat16>{})) return;
  }
  const bool dx = dx_t != nullptr, dw = dw_t != nullptr;
  const std::vector<float> xf = Widen(x), wf = Widen(w), dyf = Widen(dy_t);
  std::vector<float> xbuf, dybuf, dxf(dx ? static_cast<size_t>(x.Numel()) : 0), dxbuf(nhwc ? dxf.size() : 0),
      dwf(dw ? static_cast<size_t>(w.Numel()) : 0);
  const float* px = AsNchw(xf.data(), nhwc, g.n, g.c, g.h.in * g.w.in, xbuf);
  const float* pdy = AsNchw(dyf.data(), nhwc, g.n, g.m, g.OutPlane(), dybuf);
  ConvBackward<float>(g, px, wf.data(), pdy, dx ? (nhwc ? dxbuf.data() : dxf.data()) : nullptr,
                      dw ? dwf.data() : nullptr);
  if (nhwc && dx) TransposeChannels(dxbuf.data(), dxf.data(), g.n, g.c, g.h.in * g.w.in, false);
  if (dx) StoreResult(ctx, dx_t, x.GetShape(), dxf);
  if (dw) StoreResult(ctx, dw_t, w.GetShape(), dwf);
}

// conv2d_grad reads Input, Filter and Output@GRAD, not Output, so the
// forward output can be freed after its last forward reader.
class Conv2dGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp(
        "conv2d_grad",
        {{"Input", Input("Input")}, {"Filter", Input("Filter")}, {GradVarName("Output"), OutputGrad("Output")}},
        {{GradVarName("Input"), InputGrad("Input")}, {GradVarName("Filter"), InputGrad("Filter")}}, Attrs());
  }
};

GradCheckSpec ConvCase(std::string name, Shape input, Shape filter, AttributeMap attrs) {
  GradCheckSpec s;
  s.name = std::move(name);
  s.inputs = {CheckInput("Input", std::move(input)), CheckInput("Filter", std::move(filter))};
  s.outputs = {{"Output", 1}};
  s.attrs = std::move(attrs);
  return s;
}

}  // namespace

NABLA_REGISTER_OPS(conv2d) {
  using Ints = std::vector<int>;
  OpBuilder& op = registrar.Op("conv2d", __FILE__, __LINE__);
  op.Doc(
        "2-D convolution over NCHW images: Output[n, m] = sum over the channels c of m's group of "
        "Filter[m, c] cross-correlated with the padded Input[n, c], with strides and dilations. "
        "Output is [N, M, (H + pad_top + pad_bottom - dilation_h * (kh - 1) - 1) / stride_h + 1, "
        "(likewise for W)].")
      .Input("Input", "(Tensor) images [N, C, H, W] ([N, H, W, C] with NHWC), float32 or float64")
      .Input("Filter", "(Tensor) kernels [M, C / groups, kh, kw], Input's dtype")
      .Output("Output", "(Tensor) [N, M, H_out, W_out] ([N, H_out, W_out, M] with NHWC)")
      .Attr<Ints>("strides", {1, 1}, "(vector<int>, default [1, 1]) the window's step (height, width)")
      .Attr<Ints>("paddings", {0, 0},
                  "(vector<int>, default [0, 0]) zero padding: [height, width] on both sides, or [top, bottom, "
                  "left, right]; ignored unless padding_algorithm is EXPLICIT")
      .Attr<Ints>("dilations", {1, 1}, "(vector<int>, default [1, 1]) spacing between kernel taps (height, width)")
      .Attr<int>("groups", 1,
                 "(int, default 1) input and output channels split into this many groups, each convolved "
                 "separately (groups = C: depthwise)")
      .Attr<std::string>("padding_algorithm", "EXPLICIT",
                         "(string, default \"EXPLICIT\") EXPLICIT: use paddings; SAME: pad so that H_out = "
                         "ceil(H / stride), the odd pad at the bottom/right; VALID: no padding",
                         [](const std::string& a) { CheckPaddingAlgorithm(a, "conv2d"); })
      .Attr<std::string>("data_format", "NCHW",
                         "(string, default \"NCHW\") layout of Input and Output: NCHW or NHWC (computed as NCHW "
                         "between transposes); Filter is [M, C / groups, kh, kw] either way")
      .InferShape(InferConv2d)
      .Precision(OpPrecision::kLow)
      .GradMaker<Conv2dGradMaker>()
      .GradCheck(ConvCase("plain_pad1", {2, 3, 5, 5}, {4, 3, 3, 3}, {{"paddings", Ints{1, 1}}}))
      .GradCheck(ConvCase("stride2_asymmetric_pad", {2, 2, 6, 7}, {3, 2, 3, 2},
                          {{"strides", Ints{2, 2}}, {"paddings", Ints{1, 0, 2, 1}}}))
      .GradCheck(
          ConvCase("dilation2", {1, 2, 7, 7}, {2, 2, 3, 3}, {{"dilations", Ints{2, 2}}, {"paddings", Ints{1, 2}}}))
      .GradCheck(ConvCase("groups2", {2, 4, 5, 5}, {6, 2, 3, 3}, {{"groups", 2}, {"paddings", Ints{1, 1}}}))
      .GradCheck(ConvCase("depthwise_stride2", {2, 3, 6, 6}, {3, 1, 3, 3},
                          {{"groups", 3}, {"strides", Ints{2, 2}}, {"paddings", Ints{1, 1}}}))
      .GradCheck(ConvCase("same_stride2", {1, 2, 7, 6}, {3, 2, 3, 4},
                          {{"strides", Ints{2, 2}}, {"padding_algorithm", std::string("SAME")}}))
      .GradCheck(ConvCase(
          "nhwc_stride2_groups2", {2, 5, 6, 4}, {4, 2, 3, 3},
          {{"data_format", std::string("NHWC")}, {"groups", 2}, {"strides", Ints{2, 1}}, {"paddings", Ints{1, 1}}}))
      .GradCheck(ConvCase("valid", {1, 2, 5, 6}, {2, 2, 2, 3},
                          {{"paddings", Ints{3, 3}}, {"padding_algorithm", std::string("VALID")}}));
  OpBuilder& grad = registrar.DefaultGradOp("conv2d", __FILE__, __LINE__);
  grad.Doc("Gradient of conv2d with respect to Input and Filter.")
      .Attr<bool>(kForceFp32OutputAttr, false, kForceFp32GradsDoc)
      .InferShape([](InferShapeContext& c) {
        InferSameAs(c, "Input", GradVarName("Input"));
        InferSameAs(c, "Filter", GradVarName("Filter"));
        ForceFp32Outputs(c, "Input");
      })
      .KernelDType(DTypeOfInput(GradVarName("Output")));
  RegisterFloatKernels(registrar, "conv2d", Conv2dKernel<float>, Conv2dKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "conv2d_grad", Conv2dGradKernel<float>, Conv2dGradKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("conv2d", DeviceType::kCPU, DType::kBFloat16, Conv2dBf16Kernel, __FILE__, __LINE__);
  registrar.Kernel("conv2d_grad", DeviceType::kCPU, DType::kBFloat16, Conv2dGradBf16Kernel, __FILE__, __LINE__);
}

}  // namespace nabla::nn
