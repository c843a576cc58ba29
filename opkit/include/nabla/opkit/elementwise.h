#pragma once
// Registration templates for elementwise ops: the unary ops and activations
// of nabla/opkit/unary.h, and binary ops with Paddle's `axis` broadcasting
// whose gradients sum over the broadcast dims in a fixed order (bit-for-bit
// the same with any thread count). fwd/bwd are generic lambdas, instantiated
// for float and double.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/axis.h"
#include "nabla/opkit/broadcast.h"
#include "nabla/opkit/grad.h"
#include "nabla/opkit/kernels.h"
#include "nabla/opkit/reduce.h"
#include "nabla/opkit/unary.h"
#include "nabla/opkit/vectorized.h"
#include "nabla/tensor.h"

namespace nabla::opkit {

// Out = fwd(x, y) with Paddle's axis broadcasting. The grad op
// `<type>_grad` (X, Y, Out, Out@GRAD -> X@GRAD, Y@GRAD) sums
// gx(x, y, out, dout) and gy(...) over the dims each input was broadcast along.
template <typename T, typename Fwd>
void ElementwiseForward(const ExecutionContext& ctx, const Fwd& fwd) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx);
  const T* xd = x.Data<T>();
  const T* yd = y.Data<T>();
  T* o = AllocOutput<T>(ctx, ctx.Output("Out"), s.out);
  BroadcastIndexer(s.out, s.x, s.y).ParallelForEach([&](int64_t io, int64_t ix, int64_t iy) {
    o[io] = fwd(xd[ix], yd[iy]);
  });
}

// The gradients of a broadcast binary op: with (dx, dy) = d(io, ix, iy) for
// every output element, X@GRAD[ix] and Y@GRAD[iy] sum their terms over the
// dims each operand was broadcast along (either pointer may be null). Each
// sum starts at 0 and adds its terms in row-major order of the output,
// whatever the number of threads: when at most one operand is broadcast, and
// along one stretch of dims or around one stretch (a conv's bias), the work
// splits over that operand's elements (ParallelReduceWalk, SpanView);
// anything else runs serially.
template <typename T, typename D>
void AccumulateBroadcastGrads(const BroadcastShapes& s, T* gxd, T* gyd, D&& d) {
  const bool x_full = s.x == s.out, y_full = s.y == s.out;
  ReduceView v;
  if (x_full && y_full) {
    const int64_t n = ProductOf(s.out, 0, s.out.size());
    // One loop per pair of outputs wanted, so each vectorizes.
    VectorizedParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
      if (gxd && gyd) {
        for (int64_t i = b; i < e; ++i) {
          const auto g = d(i, i, i);
          gxd[i] = T(0) + g.first;  // as the serial sum from 0 (keeps -0 out)
          gyd[i] = T(0) + g.second;
        }
      } else if (gxd) {
        for (int64_t i = b; i < e; ++i) gxd[i] = T(0) + d(i, i, i).first;
      } else if (gyd) {
        for (int64_t i = b; i < e; ++i) gyd[i] = T(0) + d(i, i, i).second;
      }
    });
    return;
  }
  // A bias's gradient (the operand broadcast over leading rows). The
  // reduced operand's sums split over its elements (each summed in row
  // order, ParallelReduceWalkSpans); the full operand's gradient, which has
  // no sums, goes in a second pass split over whole rows, so its loops run
  // over contiguous rows however the sums split (interleaved in one walk,
  // both ran over the sums' column spans, 32 floats at 2 threads, and the
  // walk took several times its 1-thread time). The sums' pass runs first,
  // so an input that shares the full gradient's buffer is read before it is
  // overwritten.
  if (x_full && MakeReduceView(s.out, s.y, &v)) {
    if (gyd) {
      std::fill(gyd, gyd + v.outer * v.inner, T(0));
      ParallelReduceWalkSpans(v, [&](int64_t io, int64_t iy, int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) gyd[iy + i] += d(io + i, io + i, iy + i).second;
      });
    }
    if (gxd)
      ForEachReducedRow(v, [&](int64_t io, int64_t iy) {
        for (int64_t i = 0; i < v.inner; ++i) gxd[io + i] = T(0) + d(io + i, io + i, iy + i).first;
      });
    return;
  }
  if (y_full && MakeReduceView(s.out, s.x, &v)) {
    if (gxd) {
      std::fill(gxd, gxd + v.outer * v.inner, T(0));
      ParallelReduceWalkSpans(v, [&](int64_t io, int64_t ix, int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) gxd[ix + i] += d(io + i, ix + i, io + i).first;
      });
    }
    if (gyd)
      ForEachReducedRow(v, [&](int64_t io, int64_t ix) {
        for (int64_t i = 0; i < v.inner; ++i) gyd[io + i] = T(0) + d(io + i, ix + i, io + i).second;
      });
    return;
  }
  // One operand full, the other broadcast around its one stretch (a conv's
  // bias): split over the small operand's elements, each summed in a local
  // from 0 in ascending output order, the serial walk's order.
  SpanView m;
  const bool y_spans = x_full && MakeSpanView(s.out, s.y, &m);
  if (y_spans || (y_full && MakeSpanView(s.out, s.x, &m))) {
    T* g_full = y_spans ? gxd : gyd;
    T* g_span = y_spans ? gyd : gxd;
    VectorizedParallelFor(m.span, cpu::GrainForRows(m.before * m.after), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        T acc = T(0);
        for (int64_t b = 0; b < m.before; ++b) {
          const int64_t base = (b * m.span + c) * m.after;
          for (int64_t i = base; i < base + m.after; ++i) {
            const auto g = y_spans ? d(i, i, c) : d(i, c, i);
            const T full = y_spans ? g.first : g.second;
            if (g_full) g_full[i] = T(0) + full;
            acc += y_spans ? g.second : g.first;
          }
        }
        if (g_span) g_span[c] = acc;
      }
    });
    return;
  }
  BroadcastIndexer indexer(s.out, s.x, s.y);
  if (gxd) std::fill(gxd, gxd + ProductOf(s.x, 0, s.x.size()), T(0));
  if (gyd) std::fill(gyd, gyd + ProductOf(s.y, 0, s.y.size()), T(0));
  indexer.ForEach([&](int64_t io, int64_t ix, int64_t iy) {
    const auto g = d(io, ix, iy);
    if (gxd) gxd[ix] += g.first;
    if (gyd) gyd[iy] += g.second;
  });
}

template <typename T, typename Gx, typename Gy>
void ElementwiseBackward(const ExecutionContext& ctx, const Gx& gx, const Gy& gy) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Tensor& dout = ctx.Input("Out@GRAD");
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx);
  NABLA_ENFORCE(dout.GetShape() == s.out, kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD of shape ",
                ShapeToString(s.out), " but received ", ShapeToString(dout.GetShape()));
  const T* xd = x.Data<T>();
  const T* yd = y.Data<T>();
  const T* dod = dout.Data<T>();
  Tensor* dx = ctx.Output("X@GRAD");
  Tensor* dy = ctx.Output("Y@GRAD");
  T* gxd = dx ? AllocOutput<T>(ctx, dx, x.GetShape()) : nullptr;
  T* gyd = dy ? AllocOutput<T>(ctx, dy, y.GetShape()) : nullptr;
  AccumulateBroadcastGrads(s, gxd, gyd, [&](int64_t io, int64_t ix, int64_t iy) {
    return std::make_pair(gx(xd[ix], yd[iy], dod[io]), gy(xd[ix], yd[iy], dod[io]));
  });
}

inline void InferElementwiseShape(InferShapeContext& c) {
  BroadcastShapes s = BroadcastElementwise(c.InputShape("X"), c.InputShape("Y"), c.Attr<int>("axis"), c.Where());
  DType dx = c.InputDType("X"), dy = c.InputDType("Y");
  NABLA_ENFORCE(dx == dy, kInvalidArgument, c.Where(), ": X and Y must have the same dtype, but received ",
                DTypeName(dx), " and ", DTypeName(dy));
  c.SetOutputShape("Out", s.out);
  c.SetOutputDType("Out", dx);
}

// InferElementwiseShape for an op whose bfloat16 kernel also takes a
// float32 Y (OpBuilder::Bf16TakesFloat32({"Y"}): a bias that mixed
// precision keeps float32): X bfloat16 with Y float32 is accepted too.
inline void InferElementwiseShapeBf16Bias(InferShapeContext& c) {
  BroadcastShapes s = BroadcastElementwise(c.InputShape("X"), c.InputShape("Y"), c.Attr<int>("axis"), c.Where());
  DType dx = c.InputDType("X"), dy = c.InputDType("Y");
  NABLA_ENFORCE(dx == dy || (dx == DType::kBFloat16 && dy == DType::kFloat32), kInvalidArgument, c.Where(),
                ": X and Y must have the same dtype (or X bfloat16 and Y float32), but received ", DTypeName(dx),
                " and ", DTypeName(dy));
  c.SetOutputShape("Out", s.out);
  c.SetOutputDType("Out", dx);
}

// Registers `type` (float32/float64, plus int32/int64 forward kernels when
// `int_kernels`) and `<type>_grad`. fwd(x, y), gx(x, y, dout), gy(x, y, dout)
// are generic lambdas. Returns the op's builder; `grad`, when given, gets
// the grad op's.
template <typename Fwd, typename Gx, typename Gy>
OpBuilder& RegisterElementwiseOp(Registrar& registrar, const std::string& type, const std::string& doc,
                                 const char* file, int line, bool int_kernels, Fwd fwd, Gx gx, Gy gy,
                                 OpBuilder** grad = nullptr) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Doc(doc)
          .Input("X", "(Tensor) the first operand")
          .Input("Y", "(Tensor) the second operand, broadcast onto X (or X onto Y when Y has the higher rank)")
          .Output("Out", "(Tensor) the broadcast result")
          .Attr<int>("axis", -1,
                     "(int, default -1) the dim of the higher-rank operand where the other one's dims start; "
                     "-1 aligns them at the end (numpy broadcasting)")
          .InferShape(InferElementwiseShape)
          .template GradMaker<DefaultGradOpDescMaker>();
  OpBuilder& g = registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
  if (grad) *grad = &g;
  auto forward = [&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel(
        type, DeviceType::kCPU, DTypeOf<T>::value,
        [fwd](const ExecutionContext& ctx) {
          ElementwiseForward<T>(ctx, [&](T a, T c) { return static_cast<T>(fwd(a, c)); });
        },
        file, line);
  };
  ForEachType<float, double>(forward);
  if (int_kernels) ForEachType<int32_t, int64_t>(forward);
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel(
        type + "_grad", DeviceType::kCPU, DTypeOf<T>::value,
        [gx, gy](const ExecutionContext& ctx) {
          ElementwiseBackward<T>(
              ctx, [&](T a, T c, T d) { return static_cast<T>(gx(a, c, d)); },
              [&](T a, T c, T d) { return static_cast<T>(gy(a, c, d)); });
        },
        file, line);
  });
  return b;
}

}  // namespace nabla::opkit
