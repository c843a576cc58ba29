#pragma once
// Registration templates for elementwise ops: unary ops (Out = f(X)) with a
// gradient from X and Out, activations whose gradient reads Out only, and
// binary ops with Paddle's `axis` broadcasting whose gradients sum over the
// broadcast dims in a fixed order (bit-for-bit the same with any thread
// count). fwd/bwd are generic lambdas, instantiated for float and double.
// The kernels' loops run at the CPU's vector width (cpu::RunSimd).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/cpu/simd.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/axis.h"
#include "nabla/opkit/broadcast.h"
#include "nabla/opkit/grad.h"
#include "nabla/opkit/kernels.h"
#include "nabla/opkit/reduce.h"
#include "nabla/tensor.h"

namespace nabla::opkit {

// The logistic sigmoid 1 / (1 + e^-x). Both branches only ever exponentiate
// a non-positive number, so neither overflows for large |x|.
template <typename T>
T Sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// log(1 + e^x) as max(x, 0) + log1p(e^-|x|): only a non-positive number is
// exponentiated, so nothing overflows for large |x|, and log1p keeps the
// tail far below 0 where log(1 + tiny) would round to 0.
template <typename T>
T Softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}

// An elementwise op X -> Out with Out = fwd(X) and the grad op
// `<type>_grad` (X, Out, Out@GRAD -> X@GRAD) computing
// X@GRAD = bwd(x, out, dout). fwd and bwd are generic lambdas, instantiated
// for float and double.
template <typename Fwd, typename Bwd>
OpBuilder& RegisterUnaryOp(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                           int line, Fwd fwd, Bwd bwd) {
  OpBuilder& b = registrar.Op(type, file, line)
                     .Doc(doc)
                     .Input("X", "(Tensor) input of any shape")
                     .Output("Out", "(Tensor) output, of the shape of X")
                     .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
                     .template GradMaker<DefaultGradOpDescMaker>();
  registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel(
        type, DeviceType::kCPU, DTypeOf<T>::value,
        [fwd](const ExecutionContext& ctx) {
          const Tensor& x = ctx.Input("X");
          Tensor* out = ctx.Output("Out");
          const T* xd = x.Data<T>();
          T* o = AllocOutput<T>(ctx, out, x.GetShape());
          cpu::ParallelFor(x.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            cpu::RunSimd([&] {
              for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(fwd(xd[i]));
            });
          });
        },
        file, line);
    registrar.Kernel(
        type + "_grad", DeviceType::kCPU, DTypeOf<T>::value,
        [bwd](const ExecutionContext& ctx) {
          Tensor* dx = ctx.Output("X@GRAD");
          if (!dx) return;
          const Tensor& x = ctx.Input("X");
          const T* xd = x.Data<T>();
          const T* od = ctx.Input("Out").Data<T>();
          const T* dod = ctx.Input("Out@GRAD").Data<T>();
          T* g = AllocOutput<T>(ctx, dx, x.GetShape());
          cpu::ParallelFor(x.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            cpu::RunSimd([&] {
              for (int64_t i = b; i < e; ++i) g[i] = static_cast<T>(bwd(xd[i], od[i], dod[i]));
            });
          });
        },
        file, line);
  });
  return b;
}

// The schema of `<type>_grad` (Out, Out@GRAD -> X@GRAD) that
// GradFromOutMaker emits, for ops with kernels of their own (softmax).
OpBuilder& GradFromOutSchema(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                             int line);

// `<type>_grad` of an activation whose derivative is a function of its
// output (its maker is GradFromOutMaker): Out, Out@GRAD -> X@GRAD with
// X@GRAD = bwd(out, dout), float32 and float64 kernels. The forward op is the
// caller's (its kernels often vectorize in ways of their own).
template <typename Bwd>
OpBuilder& RegisterGradFromOut(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                               int line, Bwd bwd) {
  OpBuilder& b = GradFromOutSchema(registrar, type, doc, file, line);
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel(
        type + "_grad", DeviceType::kCPU, DTypeOf<T>::value,
        [bwd](const ExecutionContext& ctx) {
          Tensor* dx = ctx.Output(GradVarName("X"));
          if (!dx) return;
          const Tensor& out = ctx.Input("Out");
          const T* po = out.Data<T>();
          const T* pd = ctx.Input(GradVarName("Out")).Data<T>();
          T* pdx = AllocOutput<T>(ctx, dx, out.GetShape());
          // Pointers captured by value and both operands loaded
          // unconditionally, so a select in bwd compiles branch-free.
          cpu::ParallelFor(out.Numel(), cpu::kParallelGrain, [po, pd, pdx, bwd](int64_t b, int64_t e) {
            cpu::RunSimd([po, pd, pdx, bwd, b, e] {
              for (int64_t i = b; i < e; ++i) {
                const T o = po[i], d = pd[i];
                pdx[i] = static_cast<T>(bwd(o, d));
              }
            });
          });
        },
        file, line);
  });
  return b;
}

// What an activation's grad op reads besides Out@GRAD, as Paddle's
// ActBwdOpFwdDeps declares it per op: X (kDepX; the maker is
// GradFromInputsMaker), Out (kDepOut; GradFromOutMaker, so X can be freed
// after the forward pass) or neither (kNoDeps: ceil, floor, round, whose
// gradient is zero; GradFromOutGradMaker).
enum class GradReads { kX, kOut, kNothing };

// A float attribute of an activation, declared with its default and doc.
struct FloatAttr {
  std::string name;
  float value;
  std::string doc;
};

// An activation's float attributes as T, in the order declared (unused
// entries 0): what fwd and bwd of RegisterActivation receive.
inline constexpr size_t kMaxActivationAttrs = 3;
template <typename T>
using ActivationAttrs = std::array<T, kMaxActivationAttrs>;

template <typename T>
ActivationAttrs<T> ReadActivationAttrs(const ExecutionContext& ctx, const std::vector<std::string>& names) {
  ActivationAttrs<T> a{};
  for (size_t i = 0; i < names.size(); ++i) a[i] = static_cast<T>(ctx.Attr<float>(names[i]));
  return a;
}

// The schema and shape inference of `<type>_grad` as `reads` makes it:
// X@GRAD takes the shape and dtype of X, Out or Out@GRAD.
OpBuilder& ActivationGradSchema(Registrar& registrar, const std::string& type, GradReads reads, const char* file,
                                int line);

// An elementwise activation X -> Out (Paddle's activation_op family) with
// float `attrs` and float32/float64 CPU kernels: Out = fwd(x, a) and
// X@GRAD = bwd(v, dout, a), where a holds the attributes (ActivationAttrs)
// and v is the element of X, Out or Out@GRAD, whichever `reads` names.
// fwd and bwd are generic lambdas, instantiated for float and double.
template <typename Fwd, typename Bwd>
OpBuilder& RegisterActivation(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                              int line, const std::vector<FloatAttr>& attrs, GradReads reads, Fwd fwd, Bwd bwd) {
  NABLA_ENFORCE(attrs.size() <= kMaxActivationAttrs, kInvalidArgument, "RegisterActivation('", type, "'): at most ",
                kMaxActivationAttrs, " attributes, but received ", attrs.size());
  OpBuilder& b = registrar.Op(type, file, line)
                     .Doc(doc)
                     .Input("X", "(Tensor) input of any shape, float32 or float64")
                     .Output("Out", "(Tensor) output, of the shape and dtype of X");
  std::vector<std::string> names;
  for (const FloatAttr& a : attrs) {
    b.Attr<float>(a.name, a.value, a.doc);
    names.push_back(a.name);
  }
  b.InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
  if (reads == GradReads::kX)
    b.GradMaker<GradFromInputsMaker>();
  else if (reads == GradReads::kOut)
    b.GradMaker<GradFromOutMaker>();
  else
    b.GradMaker<GradFromOutGradMaker>();
  ActivationGradSchema(registrar, type, reads, file, line);
  const std::string grad_input = reads == GradReads::kX ? "X" : reads == GradReads::kOut ? "Out" : GradVarName("Out");
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel(
        type, DeviceType::kCPU, DTypeOf<T>::value,
        [fwd, names](const ExecutionContext& ctx) {
          const Tensor& x = ctx.Input("X");
          const ActivationAttrs<T> a = ReadActivationAttrs<T>(ctx, names);
          const T* px = x.Data<T>();
          T* po = AllocOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
          cpu::ParallelFor(x.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            cpu::RunSimd([&] {
              for (int64_t i = b; i < e; ++i) po[i] = static_cast<T>(fwd(px[i], a));
            });
          });
        },
        file, line);
    registrar.Kernel(
        type + "_grad", DeviceType::kCPU, DTypeOf<T>::value,
        [bwd, names, grad_input](const ExecutionContext& ctx) {
          Tensor* dx = ctx.Output(GradVarName("X"));
          if (!dx) return;
          const Tensor& v = ctx.Input(grad_input);
          const Tensor& dout = ctx.Input(GradVarName("Out"));
          NABLA_ENFORCE(dout.GetShape() == v.GetShape(), kInvalidArgument, "op '", ctx.Op().Type(),
                        "': expected Out@GRAD of shape ", ShapeToString(v.GetShape()), " but received ",
                        ShapeToString(dout.GetShape()));
          const ActivationAttrs<T> a = ReadActivationAttrs<T>(ctx, names);
          const T* pv = v.Data<T>();
          const T* pd = dout.Data<T>();
          T* pdx = AllocOutput<T>(ctx, dx, v.GetShape());
          cpu::ParallelFor(v.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            cpu::RunSimd([&] {
              for (int64_t i = b; i < e; ++i) pdx[i] = static_cast<T>(bwd(pv[i], pd[i], a));
            });
          });
        },
        file, line);
  });
  return b;
}

// Out = fwd(x, y) with Paddle's axis broadcasting. The grad op
// `<type>_grad` (X, Y, Out, Out@GRAD -> X@GRAD, Y@GRAD) sums
// gx(x, y, out, dout) and gy(...) over the dims each input was broadcast along.
template <typename T, typename Fwd>
void ElementwiseForward(const ExecutionContext& ctx, const Fwd& fwd) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx.Op());
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
    cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
      cpu::RunSimd([&] {
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
    cpu::ParallelFor(m.span, cpu::GrainForRows(m.before * m.after), [&](int64_t c0, int64_t c1) {
      cpu::RunSimd([&] {
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
  BroadcastShapes s = BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), ctx.Op());
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

// Registers `type` (float32/float64, plus int32/int64 forward kernels when
// `int_kernels`) and `<type>_grad`. fwd(x, y), gx(x, y, dout), gy(x, y, dout)
// are generic lambdas.
template <typename Fwd, typename Gx, typename Gy>
OpBuilder& RegisterElementwiseOp(Registrar& registrar, const std::string& type, const std::string& doc,
                                 const char* file, int line, bool int_kernels, Fwd fwd, Gx gx, Gy gy) {
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
  registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
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
