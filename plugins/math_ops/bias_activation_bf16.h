#pragma once
// The bfloat16 kernels of the bias ops: elementwise_add (BiasAct::kIdentity)
// and fused_elemwise_activation (its activation), written once.
//
// Under bfloat16 mixed precision with fusion, a bias and activation between
// two GEMMs runs here (ElideBf16Casts, nabla/mixed_precision.h): X and Out
// bfloat16, the bias Y float32 as the program keeps it (or bfloat16), and in
// the gradient Out@GRAD float32 as the next GEMM's gradient wrote it (or
// bfloat16). Each kernel widens, computes exactly what the float32 kernel
// computes from the widened values, and rounds its bfloat16 outputs once:
// the bits of the float32 op between a widening and a narrowing cast. The
// gradient recomputes the activation from X + Y rather than read the
// rounded Out.

#include <algorithm>
#include <vector>

#include "bias_activation.h"
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {

// A float32 or bfloat16 tensor as float32: its own data, or widened into buf.
inline const float* Float32Of(const Tensor& t, std::vector<float>& buf) {
  if (t.GetDType() == DType::kFloat32) return t.Data<float>();
  buf.resize(static_cast<size_t>(t.Numel()));
  cpu::ConvertFromBf16(t.Data<bfloat16>(), buf.data(), t.Numel());
  return buf.data();
}

// The sums X + Y of rows [r0, r1) of the indexer into sum, in float32 (the
// widening inline: a backend conversion call, then the bias added in a
// second loop, was slower).
inline void SumsOf(const BroadcastIndexer& indexer, int64_t r0, int64_t r1, const bfloat16* xd, const float* yf,
                   float* sum) {
  const int64_t at = r0 * indexer.Inner();
  indexer.ForEachRows(r0, r1, [&](int64_t io, int64_t ix, int64_t iy) { sum[io - at] = Bf16ToFloat(xd[ix]) + yf[iy]; });
}

// The float32 kernel's activation over n sums in place: the same vector code
// for tanh and gelu, the same scalar formula for the others.
template <BiasAct act>
void ActivateInPlace(float* v, int64_t n) {
  if constexpr (act == BiasAct::kIdentity) {
    (void)v;
    (void)n;
  } else if constexpr (act == BiasAct::kTanh) {
    cpu::Tanh(v, v, n);
  } else if constexpr (act == BiasAct::kGelu) {
    cpu::Gelu(v, v, n, false);
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = ApplyBiasAct<float>(act, v[i]);
  }
}

template <BiasAct act>
void BiasActForwardBf16(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx);
  std::vector<float> ybuf;
  const float* yf = Float32Of(y, ybuf);
  const bfloat16* xd = x.Data<bfloat16>();
  bfloat16* o = AllocOutput<bfloat16>(ctx, ctx.Output("Out"), s.out);
  BroadcastIndexer indexer(s.out, s.x, s.y);
  const int64_t inner = indexer.Inner();
  const int64_t block_rows = RowsPerBlock(inner);
  opkit::VectorizedParallelFor(indexer.Rows(), cpu::GrainForRows(inner), [&](int64_t b, int64_t e) {
    std::vector<float> sum(static_cast<size_t>(std::min(block_rows, e - b) * inner));
    for (int64_t r0 = b; r0 < e; r0 += block_rows) {
      const int64_t r1 = std::min(e, r0 + block_rows), n = (r1 - r0) * inner, at = r0 * inner;
      SumsOf(indexer, r0, r1, xd, yf, sum.data());
      ActivateInPlace<act>(sum.data(), n);
      cpu::ConvertToBf16(sum.data(), o + at, n);
    }
  });
}

// d = act'(.) * Out@GRAD for n output elements from their sums X + Y (in
// place) and Out@GRAD, in float32. Out is recomputed from the sums, not
// read: the float32 kernel reads the unrounded Out, and so gets these bits.
template <BiasAct act>
void GradFromSums(float* sum, const float* dout, float* d, int64_t n) {
  if constexpr (act == BiasAct::kGelu) {
    cpu::GeluGrad(sum, dout, d, n, false);
  } else {
    ActivateInPlace<act>(sum, n);
    for (int64_t i = 0; i < n; ++i) d[i] = BiasActGrad<float>(act, sum[i], dout[i]);
  }
}

template <BiasAct act>
void BiasActBackwardBf16(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Tensor& dout = ctx.Input("Out@GRAD");
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx);
  // Out is not read: the activation is recomputed from the sums.
  NABLA_ENFORCE(dout.GetShape() == s.out, kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD of shape ",
                ShapeToString(s.out), " but received ", ShapeToString(dout.GetShape()));
  std::vector<float> ybuf, dbuf;
  const float* yf = Float32Of(y, ybuf);
  // The identity's terms are Out@GRAD itself: a bfloat16 one is read as it
  // is in a layer's bias form, not widened whole first.
  const bool dout_low = dout.GetDType() == DType::kBFloat16;
  const bfloat16* dol = dout_low ? dout.Data<bfloat16>() : nullptr;
  const bool direct = act == BiasAct::kIdentity && dout_low;
  const float* dof = direct ? nullptr : Float32Of(dout, dbuf);
  const bfloat16* xd = x.Data<bfloat16>();
  Tensor* dx = ctx.Output("X@GRAD");
  Tensor* dy = ctx.Output("Y@GRAD");
  bfloat16* gxd = dx ? AllocOutput<bfloat16>(ctx, dx, x.GetShape()) : nullptr;
  // Y@GRAD has Y's dtype: float32 sums written as they are, or rounded.
  const bool gy_narrow = y.GetDType() == DType::kBFloat16;
  float* gy_wide = dy && !gy_narrow ? AllocOutput<float>(ctx, dy, y.GetShape()) : nullptr;
  bfloat16* gy_low = dy && gy_narrow ? AllocOutput<bfloat16>(ctx, dy, y.GetShape()) : nullptr;
  std::vector<float> gy_buf(gy_narrow && dy ? static_cast<size_t>(y.Numel()) : 0);
  float* gyf = gy_wide ? gy_wide : gy_buf.data();
  BroadcastIndexer indexer(s.out, s.x, s.y);
  ReduceView v;
  if (dy && s.x == s.out && MakeReduceView(s.out, s.y, &v) && v.outer == 1) {
    // A layer's bias (X@GRAD wanted or not: after the backward part an
    // add's X@GRAD may read Out@GRAD where it is): one pass over the rows,
    // each column's sum in row order from 0 (the float32 kernel's order),
    // split over blocks of columns.
    const int64_t m = v.r, n = v.inner;
    opkit::VectorizedParallelFor(n, std::max<int64_t>(64, cpu::GrainForRows(m)), [&](int64_t j0, int64_t j1) {
      const int64_t w = j1 - j0;
      std::vector<float> sum(static_cast<size_t>(w)), d(static_cast<size_t>(w));
      float* gy = gyf + j0;
      std::fill(gy, gy + w, 0.0f);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t at = i * n + j0;
        if (direct) {
          for (int64_t j = 0; j < w; ++j) d[j] = Bf16ToFloat(dol[at + j]);
        } else if constexpr (act == BiasAct::kIdentity) {
          for (int64_t j = 0; j < w; ++j) d[j] = dof[at + j];
        } else {
          for (int64_t j = 0; j < w; ++j) sum[j] = Bf16ToFloat(xd[at + j]) + yf[j0 + j];
          GradFromSums<act>(sum.data(), dof + at, d.data(), w);
        }
        for (int64_t j = 0; j < w; ++j) {
          d[j] = 0.0f + d[j];  // as the serial sum from 0 (keeps -0 out)
          gy[j] += d[j];
        }
        if (gxd) cpu::ConvertToBf16(d.data(), gxd + at, w);
      }
    });
  } else {
    if (direct) dof = Float32Of(dout, dbuf);
    // Any other broadcast: every term in float32, then the float32 kernel's
    // sums over them.
    std::vector<float> d(static_cast<size_t>(indexer.Total()));
    const int64_t inner = indexer.Inner();
    const int64_t block_rows = RowsPerBlock(inner);
    opkit::VectorizedParallelFor(indexer.Rows(), cpu::GrainForRows(inner), [&](int64_t b, int64_t e) {
      std::vector<float> sum(static_cast<size_t>(std::min(block_rows, e - b) * inner));
      for (int64_t r0 = b; r0 < e; r0 += block_rows) {
        const int64_t r1 = std::min(e, r0 + block_rows), at = r0 * inner;
        SumsOf(indexer, r0, r1, xd, yf, sum.data());
        GradFromSums<act>(sum.data(), dof + at, d.data() + at, (r1 - r0) * inner);
      }
    });
    std::vector<float> gx(gxd ? static_cast<size_t>(x.Numel()) : 0);
    AccumulateBroadcastGrads(s, gxd ? gx.data() : nullptr, dy ? gyf : nullptr,
                             [&](int64_t io, int64_t, int64_t) { return std::make_pair(d[io], d[io]); });
    if (gxd) cpu::ConvertToBf16(gx.data(), gxd, x.Numel());
  }
  if (gy_low) cpu::ConvertToBf16(gyf, gy_low, y.Numel());
}

}  // namespace nabla::math_ops
