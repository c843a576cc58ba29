// fused_elemwise_activation: Out = act(X + Y), Paddle's fused op for a bias
// add followed by an activation, with Y broadcast onto X as elementwise_add
// does it. functor_list is [act, "elementwise_add"] (Paddle's order: the
// unary functor applied to the binary one), act one of relu, tanh, sigmoid,
// gelu (its erf form: a gelu with `approximate` is not fused).
// FuseOps replaces `elementwise_add` + act by this op when the sum has no
// other reader: one pass over memory instead of two and one op fewer per
// layer, forward and backward. Forward and gradient compute exactly what the
// two ops compute, in the same order, so fused and unfused programs agree
// bit for bit.
#include <vector>

#include "bias_activation.h"
#include "bias_activation_bf16.h"
#include "math_util.h"
#include "nabla/opkit/gelu.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

using Act = BiasAct;

// relu, tanh, sigmoid or gelu: not "" (nothing to fuse).
bool ParseAct(const std::string& name, Act* act) { return ParseBiasAct(name, act) && *act != Act::kIdentity; }

Act ActOf(const OpDesc& op) {
  const auto& list = op.Attr<std::vector<std::string>>("functor_list");
  Act act;
  NABLA_ENFORCE(list.size() == 2 && list[1] == "elementwise_add" && ParseAct(list[0], &act), kInvalidArgument,
                "op 'fused_elemwise_activation': functor_list must be [relu|tanh|sigmoid|gelu, elementwise_add], but "
                "received ",
                AttrToString(list));
  return act;
}

template <typename T>
T Forward(Act act, T x) {
  return ApplyBiasAct(act, x);
}

template <typename T, Act act>
void FusedForward(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx);
  const T* xd = x.Data<T>();
  const T* yd = y.Data<T>();
  T* o = AllocOutput<T>(ctx, ctx.Output("Out"), s.out);
  BroadcastIndexer indexer(s.out, s.x, s.y);
  if constexpr (std::is_same_v<T, float> && (act == Act::kTanh || act == Act::kGelu)) {
    // The sum, then tanh_op's (gelu_op's) vectorized float function over it,
    // a few rows (16 KiB) at a time while they are in L1: a task is the
    // whole tensor at --threads 1, and a sum pass over all of it before the
    // activation's was a second trip to memory (the GPT's 2048 x 1024 MLP
    // activation took 2.3 ms where gelu alone takes 1.1). The sums go to
    // scratch and the function writes Out from there: summed into Out and
    // activated in place, each element of Out, a buffer not yet in cache,
    // was stored twice and loaded once (the GPT's B=16, T=64 bias + gelu,
    // per-op minima: 436-499 -> 377-415 us).
    const int64_t inner = indexer.Inner();
    const int64_t block_rows = RowsPerBlock(inner);
    opkit::VectorizedParallelFor(indexer.Rows(), cpu::GrainForRows(inner), [&](int64_t b, int64_t e) {
      std::vector<float> sums(static_cast<size_t>(block_rows * inner));
      for (int64_t r0 = b; r0 < e; r0 += block_rows) {
        const int64_t r1 = std::min(e, r0 + block_rows), base = r0 * inner;
        float* sum = sums.data();
        indexer.ForEachRows(r0, r1, [&](int64_t io, int64_t ix, int64_t iy) { sum[io - base] = xd[ix] + yd[iy]; });
        float* out = reinterpret_cast<float*>(o) + base;
        if constexpr (act == Act::kTanh)
          cpu::Tanh(sum, out, (r1 - r0) * inner);
        else
          cpu::Gelu(sum, out, (r1 - r0) * inner, false);
      }
    });
    return;
  }
  indexer.ParallelForEach(
      [&](int64_t io, int64_t ix, int64_t iy) { o[io] = Forward<T>(act, static_cast<T>(xd[ix] + yd[iy])); });
}

// A layer's bias (Y [n] added to the rows of X [m, n]) with both gradients
// wanted: one pass computes d, writes X@GRAD and adds d into Y@GRAD, where
// AccumulateBroadcastGrads takes two (the sums, then X@GRAD, each computing
// d): a third of the memory traffic of an MLP layer's activation gradient
// goes. Split over blocks of whole columns, each summed over the rows in
// row order from 0 (AccumulateBroadcastGrads' order, so the bits are the
// same, at any --threads); within a block the rows' runs stay contiguous.
// Each element of X@GRAD is written after its Out and Out@GRAD are read,
// so X@GRAD may share either's buffer. False (nothing done) for any other
// broadcast.
template <typename T, Act act>
bool BiasGradInOnePass(const BroadcastShapes& s, const T* od, const T* dod, T* gxd, T* gyd) {
  ReduceView v;
  if (s.x != s.out || !MakeReduceView(s.out, s.y, &v) || v.outer != 1) return false;
  const int64_t m = v.r, n = v.inner;
  // At least 64 columns a block: 256-byte runs of each row in float32.
  opkit::VectorizedParallelFor(n, std::max<int64_t>(64, cpu::GrainForRows(m)), [&](int64_t j0, int64_t j1) {
    T* __restrict gy = gyd + j0;
    const int64_t w = j1 - j0;
    std::fill(gy, gy + w, T(0));
    for (int64_t i = 0; i < m; ++i) {
      const T* o = od + i * n + j0;
      const T* g = dod + i * n + j0;
      T* gx = gxd + i * n + j0;
      for (int64_t j = 0; j < w; ++j) {
        const T d = BiasActGrad<T>(act, o[j], g[j]);
        gx[j] = T(0) + d;  // as the serial sum from 0 (keeps -0 out)
        gy[j] += d;
      }
    }
  });
  return true;
}

// BiasGradInOnePass for gelu, whose d needs the sum X + Y (recomputed, as
// the forward rounded it) rather than Out, over X [m, n] and Y [n]: row by
// row in row order, the sum, gelu's gradient into X@GRAD and X@GRAD added
// into Y@GRAD while the row is in cache. FusedBackward runs it where one
// task gets every row (--threads 1, or little work): the separate sums over
// all of d were a second pass over the GPT MLP's 8 MiB gradient (3.2 -> 2.5
// ms). Split across threads, each would take a block of columns, whose runs
// a page apart stream slower than the two passes over whole rows (2.1 ->
// 2.4-2.9 ms at 2 threads). Same bits as those passes (each sum in row
// order from 0); X@GRAD may share Out@GRAD's or X's buffer (both are read
// before a row is written).
template <typename T>
void GeluBiasGradRows(int64_t m, int64_t n, const T* xd, const T* yd, const T* dod, T* gxd, T* gyd) {
  std::vector<T> sum(static_cast<size_t>(n));
  std::fill(gyd, gyd + n, T(0));
  for (int64_t i = 0; i < m; ++i) {
    const T* xr = xd + i * n;
    for (int64_t j = 0; j < n; ++j) sum[j] = static_cast<T>(xr[j] + yd[j]);
    T* gx = gxd + i * n;
    if constexpr (std::is_same_v<T, float>) {
      cpu::GeluGrad(sum.data(), dod + i * n, gx, n, false);
    } else {
      for (int64_t j = 0; j < n; ++j) gx[j] = dod[i * n + j] * GeluErfGrad(sum[j]);
    }
    for (int64_t j = 0; j < n; ++j) {
      gx[j] = T(0) + gx[j];  // as the serial sum from 0 (keeps -0 out)
      gyd[j] += gx[j];
    }
  }
}

// As tanh_grad (say) then elementwise_add_grad: d = act'(Out) * dOut per
// element, accumulated into X@GRAD and Y@GRAD along the broadcast dims.
template <typename T, Act act>
void FusedBackward(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Tensor& out = ctx.Input("Out");
  const Tensor& dout = ctx.Input("Out@GRAD");
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx);
  NABLA_ENFORCE(dout.GetShape() == s.out && out.GetShape() == s.out, kInvalidArgument,
                "op 'fused_elemwise_activation_grad': expected Out and Out@GRAD of shape ", ShapeToString(s.out),
                " but received ", ShapeToString(out.GetShape()), " and ", ShapeToString(dout.GetShape()));
  const T* od = out.Data<T>();
  const T* dod = dout.Data<T>();
  Tensor* dx = ctx.Output("X@GRAD");
  Tensor* dy = ctx.Output("Y@GRAD");
  T* gxd = dx ? AllocOutput<T>(ctx, dx, x.GetShape()) : nullptr;
  T* gyd = dy ? AllocOutput<T>(ctx, dy, y.GetShape()) : nullptr;
  if constexpr (act == Act::kGelu) {
    // gelu' needs the sum, which is recomputed (as the forward rounded it)
    // instead of kept; float32 takes gelu_grad's vector code over it. The
    // sum goes through a small per-task scratch, a few rows at a time while
    // they are in cache, and d lands where it is wanted: in X@GRAD itself
    // when X is not broadcast (a layer's pre-activation), whose Y@GRAD sums
    // then read it back; in a whole-size buffer only otherwise. d is read
    // from Out@GRAD and written at the same index, so X@GRAD may share its
    // buffer.
    const T* xd = x.Data<T>();
    const T* yd = y.Data<T>();
    BroadcastIndexer indexer(s.out, s.x, s.y);
    const bool into_gx = gxd != nullptr && s.x == s.out;
    ReduceView v;
    const bool bias_form = into_gx && gyd != nullptr && MakeReduceView(s.out, s.y, &v) && v.outer == 1;
    bool summed = false;  // by the one task that got every row
    std::vector<T> whole(into_gx ? 0 : static_cast<size_t>(indexer.Total()));
    T* d = into_gx ? gxd : whole.data();
    const int64_t inner = indexer.Inner();
    const int64_t block_rows = RowsPerBlock(inner);
    opkit::VectorizedParallelFor(indexer.Rows(), cpu::GrainForRows(inner), [&](int64_t b, int64_t e) {
      if (bias_form && b == 0 && e == indexer.Rows()) {
        GeluBiasGradRows(v.r, v.inner, xd, yd, dod, gxd, gyd);
        summed = true;
        return;
      }
      std::vector<T> sum(static_cast<size_t>(std::min(block_rows, e - b) * inner));
      for (int64_t r0 = b; r0 < e; r0 += block_rows) {
        const int64_t r1 = std::min(e, r0 + block_rows), n = (r1 - r0) * inner, at = r0 * inner;
        indexer.ForEachRows(
            r0, r1, [&](int64_t io, int64_t ix, int64_t iy) { sum[io - at] = static_cast<T>(xd[ix] + yd[iy]); });
        T* out = d + at;
        if constexpr (std::is_same_v<T, float>) {
          cpu::GeluGrad(sum.data(), dod + at, out, n, false);
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = dod[at + i] * GeluErfGrad(sum[i]);
        }
        // X@GRAD as the serial sum from 0 writes it (keeps -0 out).
        if (into_gx)
          for (int64_t i = 0; i < n; ++i) out[i] = T(0) + out[i];
      }
    });
    if (!summed)
      AccumulateBroadcastGrads(s, into_gx ? nullptr : gxd, gyd,
                               [&](int64_t io, int64_t, int64_t) { return std::make_pair(d[io], d[io]); });
    return;
  }
  if (gxd && gyd && BiasGradInOnePass<T, act>(s, od, dod, gxd, gyd)) return;
  AccumulateBroadcastGrads(s, gxd, gyd, [&](int64_t io, int64_t, int64_t) {
    const T d = BiasActGrad<T>(act, od[io], dod[io]);
    return std::make_pair(d, d);
  });
}

void FusedKernelBf16(const ExecutionContext& ctx) {
  switch (ActOf(ctx.Op())) {
    case Act::kRelu:
      return BiasActForwardBf16<Act::kRelu>(ctx);
    case Act::kTanh:
      return BiasActForwardBf16<Act::kTanh>(ctx);
    case Act::kSigmoid:
      return BiasActForwardBf16<Act::kSigmoid>(ctx);
    case Act::kGelu:
      return BiasActForwardBf16<Act::kGelu>(ctx);
    case Act::kIdentity:  // refused by ActOf
      break;
  }
}

void FusedGradKernelBf16(const ExecutionContext& ctx) {
  switch (ActOf(ctx.Op())) {
    case Act::kRelu:
      return BiasActBackwardBf16<Act::kRelu>(ctx);
    case Act::kTanh:
      return BiasActBackwardBf16<Act::kTanh>(ctx);
    case Act::kSigmoid:
      return BiasActBackwardBf16<Act::kSigmoid>(ctx);
    case Act::kGelu:
      return BiasActBackwardBf16<Act::kGelu>(ctx);
    case Act::kIdentity:  // refused by ActOf
      break;
  }
}

// The activation is picked once per call, outside the loops, so each
// instantiation's loop is straight-line code the compiler vectorizes.
template <typename T>
void FusedKernel(const ExecutionContext& ctx) {
  switch (ActOf(ctx.Op())) {
    case Act::kRelu:
      return FusedForward<T, Act::kRelu>(ctx);
    case Act::kTanh:
      return FusedForward<T, Act::kTanh>(ctx);
    case Act::kSigmoid:
      return FusedForward<T, Act::kSigmoid>(ctx);
    case Act::kGelu:
      return FusedForward<T, Act::kGelu>(ctx);
    case Act::kIdentity:  // refused by ActOf
      break;
  }
}

template <typename T>
void FusedGradKernel(const ExecutionContext& ctx) {
  switch (ActOf(ctx.Op())) {
    case Act::kRelu:
      return FusedBackward<T, Act::kRelu>(ctx);
    case Act::kTanh:
      return FusedBackward<T, Act::kTanh>(ctx);
    case Act::kSigmoid:
      return FusedBackward<T, Act::kSigmoid>(ctx);
    case Act::kGelu:
      return FusedBackward<T, Act::kGelu>(ctx);
    case Act::kIdentity:  // refused by ActOf
      break;
  }
}

void InferFused(InferShapeContext& c) {
  ActOf(c.Op());
  InferElementwiseShapeBf16Bias(c);
}

// elementwise_add(X, Y) -> Out = s, then act(X = s) -> Out = h becomes
// fused_elemwise_activation(X, Y) -> Out = h.
std::unique_ptr<OpDesc> FuseAddActivation(const std::vector<const OpDesc*>& m) {
  const OpDesc& add = *m[0];
  const OpDesc& act = *m[1];
  // Paddle's functor list has no tanh-form gelu.
  if (act.Type() == "gelu" && act.HasAttr("approximate") && act.Attr<bool>("approximate")) return nullptr;
  return std::make_unique<OpDesc>(
      "fused_elemwise_activation", VarNameMap{{"X", add.Input("X")}, {"Y", add.Input("Y")}},
      VarNameMap{{"Out", act.Output("Out")}},
      AttributeMap{{"axis", add.HasAttr("axis") ? add.Attr<int>("axis") : -1},
                   {"functor_list", std::vector<std::string>{act.Type(), "elementwise_add"}}});
}

NABLA_REGISTER_OPS(fused_elemwise_activation) {
  auto fused_case = [](const std::string& act, Shape ys, int axis, double lo, double hi) {
    return CheckCase(act + (ys.size() == 1 ? "_bias" : "_same_shape"),
                     {CheckInput("X", {3, 4}, lo, hi), CheckInput("Y", std::move(ys), lo, hi)},
                     {{"axis", axis}, {"functor_list", std::vector<std::string>{act, "elementwise_add"}}});
  };
  OpBuilder& b =
      registrar.Op("fused_elemwise_activation", __FILE__, __LINE__)
          .Doc(
              "Out = act(X + Y), Y broadcast onto X as in elementwise_add; act is functor_list[0] (relu, tanh, "
              "sigmoid or gelu, its erf form). Chosen by the fusion pass for elementwise_add followed by that "
              "activation.")
          .Input("X", "(Tensor) the first operand, float32, float64 or bfloat16")
          .Input("Y", "(Tensor) the second operand (a bias), broadcast onto X; X's dtype, or float32 for a bfloat16 X")
          .Output("Out", "(Tensor) act(X + Y)")
          .Attr<int>("axis", -1, "(int, default -1) the dim of X where Y's dims start, as in elementwise_add")
          .Attr<std::vector<std::string>>(
              "functor_list", std::vector<std::string>{"relu", "elementwise_add"},
              "(list of string, default [relu, elementwise_add]) the unary functor (relu, tanh, sigmoid or gelu) then "
              "the binary one (elementwise_add): Out = unary(binary(X, Y))")
          .InferShape(InferFused)
          .Bf16TakesFloat32({"Y"})
          .GradMaker<DefaultGradOpDescMaker>()
          .GradCheck(fused_case("tanh", {4}, 1, -1.0, 1.0))
          .GradCheck(fused_case("sigmoid", {3, 4}, -1, -2.0, 2.0))
          .GradCheck(fused_case("relu", {4}, 1, 0.1, 1.0))  // X + Y > 0: away from relu's kink
          .GradCheck(fused_case("gelu", {4}, 1, -2.0, 2.0))
          .GradCheck(fused_case("gelu", {3, 4}, -1, -2.0, 2.0));
  for (const char* act : {"relu", "tanh", "sigmoid", "gelu"})
    b.Fuses(FusionPattern{{"elementwise_add", act}, FuseAddActivation});
  registrar.DefaultGradOp("fused_elemwise_activation", __FILE__, __LINE__)
      .Doc(
          "Gradient of fused_elemwise_activation: d = act'(Out) * Out@GRAD, X@GRAD and Y@GRAD sum d along the dims "
          "each was broadcast over.")
      .InferShape(InferGradShapes)
      .Bf16TakesFloat32({"Y", "Out@GRAD"});
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel("fused_elemwise_activation", DeviceType::kCPU, DTypeOf<T>::value, FusedKernel<T>, __FILE__,
                     __LINE__);
    registrar.Kernel("fused_elemwise_activation_grad", DeviceType::kCPU, DTypeOf<T>::value, FusedGradKernel<T>,
                     __FILE__, __LINE__);
  });
  registrar.Kernel("fused_elemwise_activation", DeviceType::kCPU, DType::kBFloat16, FusedKernelBf16, __FILE__,
                   __LINE__);
  registrar.Kernel("fused_elemwise_activation_grad", DeviceType::kCPU, DType::kBFloat16, FusedGradKernelBf16, __FILE__,
                   __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
