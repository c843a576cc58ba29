#pragma once
// Registration templates for elementwise unary ops: Out = f(X) with a
// gradient from X and Out (RegisterUnaryOp), activations with float
// attributes whose gradient reads X, Out or Out@GRAD only
// (RegisterActivation, RegisterGradFromOut), and the overflow-free sigmoid
// and softplus. fwd/bwd are generic lambdas, instantiated for float and
// double. Header-only and free of the core's broadcasting and reductions:
// plugins on the C ABI (nabla/sdk/opkit.h) compile these same templates
// against the SDK.
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
#include "nabla/opkit/grad.h"
#include "nabla/opkit/kernels.h"
#include "nabla/opkit/vectorized.h"
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
          VectorizedParallelFor(x.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(fwd(xd[i]));
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
          VectorizedParallelFor(x.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) g[i] = static_cast<T>(bwd(xd[i], od[i], dod[i]));
          });
        },
        file, line);
  });
  return b;
}

// The schema of `<type>_grad` (Out, Out@GRAD -> X@GRAD) that
// GradFromOutMaker emits, for ops with kernels of their own (softmax).
inline OpBuilder& GradFromOutSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                                    const char* file, int line) {
  return registrar.DefaultGradOp(type, file, line)
      .Doc(doc)
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "Out", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
}

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
          VectorizedParallelFor(out.Numel(), cpu::kParallelGrain, [po, pd, pdx, bwd](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
              const T o = po[i], d = pd[i];
              pdx[i] = static_cast<T>(bwd(o, d));
            }
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
inline OpBuilder& ActivationGradSchema(Registrar& registrar, const std::string& type, GradReads reads, const char* file,
                                       int line) {
  const std::string from = reads == GradReads::kX ? "X" : reads == GradReads::kOut ? "Out" : GradVarName("Out");
  return registrar.DefaultGradOp(type, file, line)
      .Doc("Gradient of " + type + ": X@GRAD from Out@GRAD" + (reads == GradReads::kNothing ? "" : " and " + from) +
           ".")
      .InferShape([from](InferShapeContext& c) { InferSameAs(c, from, GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
}

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
          VectorizedParallelFor(x.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            const ActivationAttrs<T> la = a;  // a local: see ParallelElementwise
            for (int64_t i = b; i < e; ++i) po[i] = static_cast<T>(fwd(px[i], la));
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
          VectorizedParallelFor(v.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            const ActivationAttrs<T> la = a;  // a local: see ParallelElementwise
            for (int64_t i = b; i < e; ++i) pdx[i] = static_cast<T>(bwd(pv[i], pd[i], la));
          });
        },
        file, line);
  });
  return b;
}

}  // namespace nabla::opkit
