#pragma once
// Private helpers shared by the math_ops op files: kernel registration over a
// list of dtypes, broadcast index math (elementwise ops and reductions share
// it), a unary-op template, random numbers that are identical on every
// platform, and GradCheck case builders. Nothing here is part of nabla's API.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::math_ops {

// ---------------------------------------------------------------- kernels

// Registers Kernel<T>{} as the CPU kernel of `type` for every T in Ts.
template <template <typename> class Kernel, typename... Ts>
void RegisterCpuKernels(Registrar& registrar, const std::string& type, const char* file, int line) {
  (registrar.Kernel(type, DeviceType::kCPU, DTypeOf<Ts>::value, Kernel<Ts>{}, file, line), ...);
}

template <typename T>
struct TypeTag {
  using type = T;
};
// Calls f(TypeTag<T>{}) for every T in Ts (for kernels built from lambdas).
template <typename... Ts, typename F>
void ForEachType(F&& f) {
  (f(TypeTag<Ts>{}), ...);
}

// Allocates `out` with the shape runtime shape inference gave it.
template <typename T>
T* AllocOutput(const ExecutionContext& ctx, Tensor* out) {
  return out->Allocate<T>(ctx.GetDevice(), out->GetShape());
}

template <typename T>
T* AllocOutput(const ExecutionContext& ctx, Tensor* out, Shape shape) {
  return out->Allocate<T>(ctx.GetDevice(), std::move(shape));
}

// ---------------------------------------------------------------- shapes

inline int64_t ProductOf(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) {
    if (s[i] < 0) return -1;
    p *= s[i];
  }
  return p;
}

inline Shape ShapeFromAttr(const std::vector<int>& dims) { return Shape(dims.begin(), dims.end()); }

// X@GRAD[i] takes the shape and dtype of X[i], for every gradient output slot
// of a grad op whose forward input slot is also one of its inputs.
inline void InferGradShapes(InferShapeContext& c) {
  for (const auto& [slot, args] : c.Op().Outputs()) {
    if (!IsGradVarName(slot)) continue;
    std::string fwd = StripGradSuffix(slot);
    if (!c.HasInput(fwd)) continue;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == kEmptyVarName) continue;
      c.ShareShapeAndDType(fwd, slot, i, i);
    }
  }
}

// Rejects an `axis` attribute outside [-rank, rank) and maps it into [0, rank).
inline int NormalizeAxis(int axis, size_t rank, const std::string& attr, const std::string& where) {
  int r = static_cast<int>(rank);
  NABLA_ENFORCE(axis >= -r && axis < r, kOutOfRange, where, ": attribute ", attr, " must be in [", -r, ", ", r,
                ") for an input of rank ", r, ", but received ", axis);
  return axis < 0 ? axis + r : axis;
}

inline DType ParseDTypeAttr(const std::string& name, const std::string& attr, const std::string& where) {
  DType d;
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument, where, ": attribute ", attr,
                " must be one of float32, float64, int32, int64, bool, but received '", name, "'");
  return d;
}

// Checker for string dtype attributes, so a bad name fails when the program
// is loaded rather than when the op first runs.
inline void CheckDTypeName(const std::string& name) {
  DType d;
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument,
                "dtype must be one of float32, float64, int32, int64, bool, but received '", name, "'");
}

inline void CheckShapeAttr(const std::vector<int>& shape) {
  for (int d : shape)
    NABLA_ENFORCE(d >= 0, kInvalidArgument, "every dim of attribute shape must be >= 0, but received ",
                  ShapeToString(ShapeFromAttr(shape)));
}

// Ops with no input pick their kernel by their `dtype` attribute.
inline DType KernelDTypeFromAttr(const ExecutionContext& ctx) {
  return ParseDTypeAttr(ctx.Attr<std::string>("dtype"), "dtype", StrCat("op '", ctx.Op().Type(), "'"));
}

// Out gets the shape of attribute `shape` and the dtype of attribute `dtype`.
inline void InferFromShapeAndDTypeAttrs(InferShapeContext& c) {
  c.SetOutputShape("Out", ShapeFromAttr(c.Attr<std::vector<int>>("shape")));
  c.SetOutputDType("Out", ParseDTypeAttr(c.Attr<std::string>("dtype"), "dtype", c.Where()));
}

// ---------------------------------------------------------------- broadcasting

// Paddle's elementwise rule: the operand of lower rank is aligned with the
// other's dims starting at `axis` (-1: at the end, numpy style) and padded
// with 1s; trailing 1 dims of the lower-rank operand are dropped when they
// would not fit. Then each dim pair must be equal or contain a 1 (-1 means
// unknown at build time). `x` and `y` come back padded to the output rank.
struct BroadcastShapes {
  Shape x, y, out;
};

inline BroadcastShapes BroadcastElementwise(const Shape& x, const Shape& y, int axis, const std::string& where) {
  bool x_big = x.size() >= y.size();
  const Shape& big = x_big ? x : y;
  Shape small = x_big ? y : x;
  size_t rank = big.size();
  if (axis == -1) axis = static_cast<int>(rank - small.size());
  while (axis >= 0 && static_cast<size_t>(axis) + small.size() > rank && !small.empty() && small.back() == 1)
    small.pop_back();
  NABLA_ENFORCE(axis >= 0 && static_cast<size_t>(axis) + small.size() <= rank, kInvalidArgument, where,
                ": attribute axis must be in [0, ", rank - small.size(), "] to align ", x_big ? "Y" : "X", " (shape ",
                ShapeToString(x_big ? y : x), ") with ", x_big ? "X" : "Y", " (shape ", ShapeToString(big),
                "), but received ", axis);
  Shape padded(rank, 1);
  for (size_t i = 0; i < small.size(); ++i) padded[axis + i] = small[i];
  BroadcastShapes r;
  r.x = x_big ? big : padded;
  r.y = x_big ? padded : big;
  r.out.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = r.x[i], b = r.y[i];
    if (a == b) {
      r.out[i] = a;
    } else if (a == 1) {
      r.out[i] = b;
    } else if (b == 1) {
      r.out[i] = a;
    } else if (a < 0 || b < 0) {
      r.out[i] = a < 0 ? b : a;
    } else {
      NABLA_THROW(kInvalidArgument, where, ": X and Y cannot be broadcast with axis ", axis,
                  ": expected equal dims or a 1 at every aligned position, but received X shape ", ShapeToString(x),
                  " and Y shape ", ShapeToString(y), " (dim ", i, ": ", a, " vs ", b, ")");
    }
  }
  return r;
}

// Walks every element of `out` together with the matching element of two
// operands whose shapes have out's rank and equal out's dims or are 1 there
// (broadcast). Used by elementwise ops (forward and gradient reduction) and by
// reductions (a keep_dim output is an operand broadcast along reduced dims).
class BroadcastIndexer {
 public:
  BroadcastIndexer(const Shape& out, const Shape& a, const Shape& b) {
    size_t rank = out.size();
    std::vector<int64_t> sa(rank), sb(rank);
    int64_t ca = 1, cb = 1;
    for (size_t k = rank; k-- > 0;) {
      sa[k] = a[k] == out[k] ? ca : 0;
      sb[k] = b[k] == out[k] ? cb : 0;
      ca *= a[k];
      cb *= b[k];
      total_ *= out[k];
    }
    // Drop size-1 dims and merge neighbours whose strides stay contiguous for
    // both operands, so the inner loop runs over as long a stretch as possible.
    for (size_t k = 0; k < rank; ++k) {
      if (out[k] == 1) continue;
      if (!dims_.empty() && a_strides_.back() == sa[k] * out[k] && b_strides_.back() == sb[k] * out[k]) {
        dims_.back() *= out[k];
        a_strides_.back() = sa[k];
        b_strides_.back() = sb[k];
      } else {
        dims_.push_back(out[k]);
        a_strides_.push_back(sa[k]);
        b_strides_.push_back(sb[k]);
      }
    }
  }

  int64_t Total() const { return total_; }

  // The walk is `Rows()` stretches of `Inner()` contiguous output elements.
  int64_t Inner() const { return dims_.empty() ? 1 : dims_.back(); }
  int64_t Rows() const { return total_ == 0 ? 0 : total_ / Inner(); }

  // f(i_out, i_a, i_b) for every output element, in row-major order.
  template <typename F>
  void ForEach(F&& f) const {
    ForEachRows(0, Rows(), f);
  }

  // The same for the output elements of rows [row_begin, row_end) only, so
  // disjoint row ranges can run in parallel.
  template <typename F>
  void ForEachRows(int64_t row_begin, int64_t row_end, F&& f) const {
    if (total_ == 0 || row_begin >= row_end) return;
    if (dims_.empty()) {
      f(int64_t{0}, int64_t{0}, int64_t{0});
      return;
    }
    size_t last = dims_.size() - 1;
    int64_t inner = dims_[last], ia_step = a_strides_[last], ib_step = b_strides_[last];
    // The multi-index of row_begin over the outer dims.
    std::vector<int64_t> idx(last, 0);
    int64_t io = row_begin * inner, ia = 0, ib = 0;
    for (size_t d = last, rest = static_cast<size_t>(row_begin); d-- > 0;) {
      idx[d] = static_cast<int64_t>(rest % static_cast<size_t>(dims_[d]));
      rest /= static_cast<size_t>(dims_[d]);
      ia += idx[d] * a_strides_[d];
      ib += idx[d] * b_strides_[d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      for (int64_t k = 0; k < inner; ++k) f(io + k, ia + k * ia_step, ib + k * ib_step);
      io += inner;
      for (size_t d = last; d-- > 0;) {
        ia += a_strides_[d];
        ib += b_strides_[d];
        if (++idx[d] < dims_[d]) break;
        ia -= a_strides_[d] * dims_[d];
        ib -= b_strides_[d] * dims_[d];
        idx[d] = 0;
      }
    }
  }

  // Runs ForEach's calls split over rows with cpu::ParallelFor; f must only
  // write output-indexed (or otherwise disjoint) elements.
  template <typename F>
  void ParallelForEach(F&& f) const {
    cpu::ParallelFor(Rows(), cpu::GrainForRows(Inner()), [&](int64_t b, int64_t e) { ForEachRows(b, e, f); });
  }

 private:
  std::vector<int64_t> dims_, a_strides_, b_strides_;
  int64_t total_ = 1;
};

// ---------------------------------------------------------------- reductions

// `out` seen as [outer, r, inner] around the one stretch of dims along which
// operand `a` (out's rank, 1 or out's dim everywhere) is broadcast; then a is
// [outer, inner] in memory. False when a is broadcast along two separate
// stretches (those go the serial way). No broadcast at all: r = 1.
struct ReduceView {
  int64_t outer = 1, r = 1, inner = 1;
};

inline bool MakeReduceView(const Shape& out, const Shape& a, ReduceView* v) {
  *v = ReduceView{};
  int stage = 0;  // 0: before the reduced stretch, 1: in it, 2: after it
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k] == 1) continue;
    bool reduced = a[k] == 1;
    if (reduced) {
      if (stage == 2) return false;
      stage = 1;
      v->r *= out[k];
    } else {
      if (stage == 1) stage = 2;
      (stage == 0 ? v->outer : v->inner) *= out[k];
    }
  }
  if (stage == 0) {  // nothing reduced: every element is its own output
    v->inner = 1;
  }
  return true;
}

// Calls f(io, ia) for every element io of out (seen as [outer, r, inner])
// with ia = the element of the broadcast operand it reduces into, split over
// the operand's elements with cpu::ParallelFor: each operand element is
// visited by one chunk, over r in ascending order as a serial row-major walk
// does, so sums come out bit for bit the same with any number of threads.
template <typename F>
void ParallelReduceWalk(const ReduceView& v, F&& f) {
  const int64_t positions = v.outer * v.inner;
  const int64_t r = v.r, inner = v.inner;
  cpu::ParallelFor(positions, cpu::GrainForRows(r), [&](int64_t p0, int64_t p1) {
    for (int64_t o = p0 / inner; o * inner < p1; ++o) {
      const int64_t i0 = std::max(p0, o * inner) - o * inner;
      const int64_t i1 = std::min(p1, (o + 1) * inner) - o * inner;
      const int64_t ia0 = o * inner;
      for (int64_t k = 0; k < r; ++k) {
        const int64_t base = (o * r + k) * inner;
        for (int64_t i = i0; i < i1; ++i) f(base + i, ia0 + i);
      }
    }
  });
}

// A sum of n terms term(i) in Acc, in fixed blocks: the blocks' partial sums
// (each in index order) are added in block order, so the result depends on n
// only, never on the number of threads.
template <typename Acc, typename Term>
Acc DeterministicSum(int64_t n, Term&& term) {
  constexpr int64_t kBlock = 4 * cpu::kParallelGrain;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto block_sum = [&](int64_t b) {
    Acc acc = Acc(0);
    for (int64_t i = b * kBlock, e = std::min(n, (b + 1) * kBlock); i < e; ++i) acc += term(i);
    return acc;
  };
  if (blocks <= 1) return n > 0 ? block_sum(0) : Acc(0);
  std::vector<Acc> partial(static_cast<size_t>(blocks));
  cpu::ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) partial[static_cast<size_t>(b)] = block_sum(b);
  });
  Acc acc = Acc(0);
  for (Acc p : partial) acc += p;
  return acc;
}

// The reduced dims of `x` as a mask (negative dims count from the end; an
// empty list or reduce_all reduces everything).
inline std::vector<bool> ReducedDims(const Shape& x, const std::vector<int>& dims, bool reduce_all,
                                     const std::string& where) {
  std::vector<bool> mask(x.size(), reduce_all || dims.empty());
  if (!reduce_all)
    for (int d : dims) mask[NormalizeAxis(d, x.size(), "dim", where)] = true;
  return mask;
}

// Shape of the reduction with the reduced dims kept as 1.
inline Shape KeepDimShape(const Shape& x, const std::vector<bool>& mask) {
  Shape s = x;
  for (size_t i = 0; i < s.size(); ++i)
    if (mask[i]) s[i] = 1;
  return s;
}

// The output shape: keep_dim keeps 1s, otherwise reduced dims go, and a full
// reduction gives [1] (Paddle's convention: never rank 0).
inline Shape ReducedShape(const Shape& x, const std::vector<bool>& mask, bool keep_dim) {
  if (keep_dim) return KeepDimShape(x, mask);
  Shape s;
  for (size_t i = 0; i < x.size(); ++i)
    if (!mask[i]) s.push_back(x[i]);
  if (s.empty()) s.push_back(1);
  return s;
}

struct ReducePlan {
  Shape keep;         // the output shape with reduced dims kept as 1
  int64_t count = 1;  // elements summed into each output element
};

inline ReducePlan MakeReducePlan(const ExecutionContext& ctx, const Shape& x) {
  std::vector<bool> mask = ReducedDims(x, ctx.Attr<std::vector<int>>("dim"), ctx.Attr<bool>("reduce_all"),
                                       StrCat("op '", ctx.Op().Type(), "'"));
  ReducePlan p{KeepDimShape(x, mask), 1};
  for (size_t i = 0; i < x.size(); ++i)
    if (mask[i]) p.count *= x[i];
  return p;
}

// reduce_sum and reduce_mean (X -> Out; dim, keep_dim, reduce_all) and their
// grad ops, which spread Out@GRAD (divided by the count for the mean) back
// over the reduced dims.
template <typename T>
void ReduceForward(const ExecutionContext& ctx, bool mean) {
  const Tensor& x = ctx.Input("X");
  ReducePlan p = MakeReducePlan(ctx, x.GetShape());
  Tensor* out = ctx.Output("Out");
  T* o = AllocOutput<T>(ctx, out);
  using Acc = std::conditional_t<std::is_integral_v<T>, T, double>;
  const T* xd = x.Data<T>();
  auto finish = [&](Acc a) { return static_cast<T>(mean && p.count > 0 ? a / static_cast<Acc>(p.count) : a); };
  ReduceView v;
  if (MakeReduceView(x.GetShape(), p.keep, &v)) {
    if (v.outer * v.inner == 1) {  // everything into one element
      o[0] = finish(DeterministicSum<Acc>(x.Numel(), [&](int64_t i) { return static_cast<Acc>(xd[i]); }));
      return;
    }
    std::vector<Acc> acc(static_cast<size_t>(out->Numel()), Acc(0));
    ParallelReduceWalk(v, [&](int64_t ix, int64_t io) { acc[io] += static_cast<Acc>(xd[ix]); });
    cpu::ParallelFor(out->Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = finish(acc[i]);
    });
    return;
  }
  std::vector<Acc> acc(static_cast<size_t>(out->Numel()), Acc(0));
  BroadcastIndexer(x.GetShape(), x.GetShape(), p.keep).ForEach([&](int64_t, int64_t ix, int64_t io) {
    acc[io] += static_cast<Acc>(xd[ix]);
  });
  for (size_t i = 0; i < acc.size(); ++i) o[i] = finish(acc[i]);
}

template <typename T>
void ReduceBackward(const ExecutionContext& ctx, bool mean) {
  Tensor* dx = ctx.Output("X@GRAD");
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  ReducePlan p = MakeReducePlan(ctx, x.GetShape());
  const T* dod = ctx.Input("Out@GRAD").Data<T>();
  T* g = AllocOutput<T>(ctx, dx, x.GetShape());
  T scale = mean && p.count > 0 ? T(1) / static_cast<T>(p.count) : T(1);
  BroadcastIndexer(x.GetShape(), x.GetShape(), p.keep).ParallelForEach([&](int64_t, int64_t ix, int64_t io) {
    g[ix] = dod[io] * scale;
  });
}

inline void InferReduceShape(InferShapeContext& c) {
  Shape x = c.InputShape("X");
  std::vector<bool> mask = ReducedDims(x, c.Attr<std::vector<int>>("dim"), c.Attr<bool>("reduce_all"), c.Where());
  c.SetOutputShape("Out", ReducedShape(x, mask, c.Attr<bool>("keep_dim")));
  c.SetOutputDType("Out", c.InputDType("X"));
}

template <typename T>
struct ReduceSumKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceForward<T>(ctx, false); }
};
template <typename T>
struct ReduceSumGradKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceBackward<T>(ctx, false); }
};
template <typename T>
struct ReduceMeanKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceForward<T>(ctx, true); }
};
template <typename T>
struct ReduceMeanGradKernel {
  void operator()(const ExecutionContext& ctx) const { ReduceBackward<T>(ctx, true); }
};

// The schema both reductions share.
inline OpBuilder& ReduceOpSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                                 const char* file, int line) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Doc(doc)
          .Input("X", "(Tensor) the input")
          .Output("Out", "(Tensor) the reduced tensor")
          .Attr<std::vector<int>>("dim", {0},
                                  "(ints, default [0]) the dims to reduce; negative dims count from the end, "
                                  "and an empty list reduces every dim")
          .Attr<bool>("keep_dim", false, "(bool, default false) keep reduced dims as 1 instead of removing them")
          .Attr<bool>("reduce_all", false,
                      "(bool, default false) reduce every dim, whatever dim says; "
                      "Out is then [1] (or all 1s with keep_dim)")
          .InferShape(InferReduceShape)
          .template GradMaker<DefaultGradOpDescMaker>();
  registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
  return b;
}

// ---------------------------------------------------------------- random

// Random numbers from std::mt19937_64 (whose sequence the standard fixes)
// converted by hand: std's distributions differ between standard libraries,
// and seeded runs must give the same tensors everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double Uniform01() { return static_cast<double>(gen_() >> 11) * (1.0 / 9007199254740992.0); }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform01(); }
  // Box-Muller; both values of a pair are used.
  double Normal(double mean, double std) {
    if (has_spare_) {
      has_spare_ = false;
      return mean + std * spare_;
    }
    double u1 = 1.0 - Uniform01();  // (0, 1]: log stays finite
    double u2 = Uniform01();
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return mean + std * r * std::cos(kTwoPi * u2);
  }

 private:
  static constexpr double kTwoPi = 6.283185307179586476925286766559;
  std::mt19937_64 gen_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Fills Out (shape and dtype from attributes) with draw(rng) per element.
template <typename T, typename Draw>
void FillRandom(const ExecutionContext& ctx, Draw&& draw) {
  Tensor* out = ctx.Output("Out");
  T* o = AllocOutput<T>(ctx, out, ShapeFromAttr(ctx.Attr<std::vector<int>>("shape")));
  Rng rng(ctx.Seed());
  for (int64_t i = 0, n = out->Numel(); i < n; ++i) o[i] = static_cast<T>(draw(rng));
}

// Registers an op `type` with no input that fills Out of attribute shape and
// dtype (float32, float64) with draw(ctx, rng) values. `attrs` adds the op's
// own attributes to the builder.
template <typename MakeDraw>
OpBuilder& RegisterRandomOp(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                            int line, MakeDraw make_draw) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Doc(doc)
          .Output("Out", "(Tensor) the random tensor, of attribute shape and dtype")
          .Attr<std::vector<int>>("shape", {}, "(ints, default []) the shape of Out", CheckShapeAttr)
          .Attr<int>("seed", 0,
                     "(int, default 0) random seed; 0 derives one from the run's seed and this op, "
                     "so seeded runs are reproducible")
          .Attr<std::string>("dtype", "float32", "(string, default \"float32\") float32 or float64", CheckDTypeName)
          .InferShape(InferFromShapeAndDTypeAttrs)
          .KernelDType(KernelDTypeFromAttr)
          .template GradMaker<EmptyGradOpDescMaker>()
          .Random();
  ForEachType<float, double>([&](auto tag) {
    using T = typename decltype(tag)::type;
    registrar.Kernel(
        type, DeviceType::kCPU, DTypeOf<T>::value,
        [make_draw](const ExecutionContext& ctx) { FillRandom<T>(ctx, make_draw(ctx)); }, file, line);
  });
  return b;
}

// fan_in and fan_out of a weight of shape `shape`, as the xavier_* and
// kaiming_* initializers use them. nabla stores a 2-D weight as [in, out]
// (mul computes X[N, in] * W[in, out]), so fan_in = shape[0] and
// fan_out = shape[1]; PyTorch stores [out, in] and reads them the other way
// round, giving the same numbers for the same layer. Rank > 2 is a conv
// filter [out_channels, in_channels, k...]: fan_in = shape[1] * prod(k),
// fan_out = shape[0] * prod(k). Rank 1: both are shape[0]; rank 0: both 1.
struct Fans {
  double in = 1.0, out = 1.0;
};

inline Fans ComputeFans(const Shape& shape) {
  Fans f;
  if (shape.size() == 1) {
    f.in = f.out = static_cast<double>(shape[0]);
  } else if (shape.size() == 2) {
    f.in = static_cast<double>(shape[0]);
    f.out = static_cast<double>(shape[1]);
  } else if (shape.size() > 2) {
    double receptive = static_cast<double>(ProductOf(shape, 2, shape.size()));
    f.in = static_cast<double>(shape[1]) * receptive;
    f.out = static_cast<double>(shape[0]) * receptive;
  }
  return f;
}

// The fan an initializer scales by, checked to be positive.
inline double InitializerFan(const ExecutionContext& ctx, double fan) {
  NABLA_ENFORCE(fan > 0, kInvalidArgument, "op '", ctx.Op().Type(), "': the fan computed from shape ",
                ShapeToString(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape"))), " must be positive, but received ",
                fan);
  return fan;
}

// kaiming_*: the standard deviation gain / sqrt(fan) with PyTorch's
// leaky_relu gain sqrt(2 / (1 + negative_slope^2)) and fan chosen by `mode`.
inline double KaimingStd(const ExecutionContext& ctx) {
  Fans f = ComputeFans(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape")));
  const std::string& mode = ctx.Attr<std::string>("mode");
  double a = ctx.Attr<float>("negative_slope");
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  return gain / std::sqrt(InitializerFan(ctx, mode == "fan_out" ? f.out : f.in));
}

inline OpBuilder& KaimingAttrs(OpBuilder& b) {
  return b
      .Attr<std::string>("mode", "fan_in",
                         "(string, default \"fan_in\") fan_in keeps the forward variance, fan_out the backward one",
                         [](const std::string& m) {
                           NABLA_ENFORCE(m == "fan_in" || m == "fan_out", kInvalidArgument,
                                         "attribute mode must be fan_in or fan_out, but received '", m, "'");
                         })
      .Attr<float>("negative_slope", 0.0f,
                   "(float, default 0.0) the negative slope of the leaky_relu that follows (0: relu)");
}

// xavier_*: scaled by gain * sqrt(2 / (fan_in + fan_out)).
inline double XavierStd(const ExecutionContext& ctx) {
  Fans f = ComputeFans(ShapeFromAttr(ctx.Attr<std::vector<int>>("shape")));
  return ctx.Attr<float>("gain") * std::sqrt(2.0 / InitializerFan(ctx, f.in + f.out));
}

// ---------------------------------------------------------------- GEMM

// cpu::Gemm for possibly empty matrices: BLAS rejects leading dimensions of 0,
// and a product over k == 0 is beta * C.
template <typename T>
void GemmAnySize(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  cpu::Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// ---------------------------------------------------------------- grad checks

inline GradCheckInput CheckInput(std::string slot, Shape shape, double low = -1.0, double high = 1.0) {
  GradCheckInput in;
  in.slot = std::move(slot);
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}

inline GradCheckInput NoCheck(GradCheckInput in) {
  in.check = false;
  return in;
}

inline GradCheckInput AwayFromKinks(GradCheckInput in, std::vector<double> kinks, double margin) {
  in.kinks = std::move(kinks);
  in.kink_margin = margin;
  return in;
}

inline GradCheckSpec CheckCase(std::string name, std::vector<GradCheckInput> inputs, AttributeMap attrs = {},
                               std::vector<std::pair<std::string, int>> outputs = {{"Out", 1}}) {
  GradCheckSpec spec;
  spec.name = std::move(name);
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.outputs = std::move(outputs);
  return spec;
}

// A grad check of a binary op with a kink where X == Y (elementwise_max,
// elementwise_min): Y holds fixed values and X keeps away from all of them,
// so no central difference straddles a tie.
inline GradCheckSpec TieFreeCase(std::string name, Shape x, Shape y, std::vector<double> y_values,
                                 AttributeMap attrs = {}) {
  GradCheckInput yin = CheckInput("Y", std::move(y));
  yin.values = y_values;
  return CheckCase(std::move(name), {AwayFromKinks(CheckInput("X", std::move(x)), std::move(y_values), 0.02), yin},
                   std::move(attrs));
}

// ---------------------------------------------------------------- unary ops

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
          cpu::ParallelFor(x.Numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) g[i] = static_cast<T>(bwd(xd[i], od[i], dod[i]));
          });
        },
        file, line);
  });
  return b;
}

// ---------------------------------------------------------------- elementwise binary ops

// Out = fwd(x, y) with Paddle's axis broadcasting. The grad op
// `<type>_grad` (X, Y, Out, Out@GRAD -> X@GRAD, Y@GRAD) sums
// gx(x, y, out, dout) and gy(...) over the dims each input was broadcast along.
template <typename T, typename Fwd>
void ElementwiseForward(const ExecutionContext& ctx, const Fwd& fwd) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  BroadcastShapes s =
      BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), StrCat("op '", ctx.Op().Type(), "'"));
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
// along one stretch of dims, the work splits over that operand's elements
// (ParallelReduceWalk); anything else runs serially.
template <typename T, typename D>
void AccumulateBroadcastGrads(const BroadcastShapes& s, T* gxd, T* gyd, D&& d) {
  const bool x_full = s.x == s.out, y_full = s.y == s.out;
  ReduceView v;
  if (x_full && y_full) {
    const int64_t n = ProductOf(s.out, 0, s.out.size());
    // One loop per pair of outputs wanted, so each vectorizes.
    cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
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
  if (x_full && MakeReduceView(s.out, s.y, &v)) {
    if (gyd) std::fill(gyd, gyd + v.outer * v.inner, T(0));
    ParallelReduceWalk(v, [&](int64_t io, int64_t iy) {
      const auto g = d(io, io, iy);
      if (gxd) gxd[io] = T(0) + g.first;
      if (gyd) gyd[iy] += g.second;
    });
    return;
  }
  if (y_full && MakeReduceView(s.out, s.x, &v)) {
    if (gxd) std::fill(gxd, gxd + v.outer * v.inner, T(0));
    ParallelReduceWalk(v, [&](int64_t io, int64_t ix) {
      const auto g = d(io, ix, io);
      if (gxd) gxd[ix] += g.first;
      if (gyd) gyd[io] = T(0) + g.second;
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
  BroadcastShapes s =
      BroadcastElementwise(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), StrCat("op '", ctx.Op().Type(), "'"));
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

// `<type>_grad` reading every forward input and every output gradient, but
// no forward output: ops whose gradient needs X's shape (and index inputs)
// only, so Out can be freed after the forward pass, as in Paddle's
// slice_grad, gather_grad, stack_grad, squeeze_grad, expand_grad.
class GradFromInputsMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    auto op = std::make_unique<OpDesc>();
    op->SetType(ForwardOp().Type() + "_grad");
    for (const auto& slot : InputSlots()) {
      op->SetInput(slot, Input(slot));
      op->SetOutput(GradVarName(slot), InputGrad(slot));
    }
    for (const auto& slot : OutputSlots()) op->SetInput(GradVarName(slot), OutputGrad(slot));
    op->MutableAttrs() = Attrs();
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::move(op));
    return ops;
  }
};

// ---------------------------------------------------------------- views

// Out = X's buffer under a new shape (reshape, squeeze, unsqueeze, flatten).
// A kernel that later writes Out allocates a fresh buffer because
// Tensor::Allocate never reuses a shared one.
inline void ViewAs(const ExecutionContext& ctx, const std::string& in_slot, const std::string& out_slot, Shape shape) {
  const Tensor& x = ctx.Input(in_slot);
  Tensor* out = ctx.Output(out_slot);
  NABLA_ENFORCE(NumElements(shape) == x.Numel(), kInvalidArgument, "op '", ctx.Op().Type(), "': ", out_slot,
                " of shape ", ShapeToString(shape), " cannot view ", in_slot, " of shape ",
                ShapeToString(x.GetShape()));
  out->ShareDataWith(x);
  out->Resize(std::move(shape));
}

// The gradient of a view: X@GRAD = Out@GRAD seen in X's shape.
inline void ViewGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output("X@GRAD");
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  const Tensor& dout = ctx.Input("Out@GRAD");
  NABLA_ENFORCE(dout.Numel() == x.Numel(), kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD with ",
                x.Numel(), " elements (X shape ", ShapeToString(x.GetShape()), "), but received shape ",
                ShapeToString(dout.GetShape()));
  Shape shape = x.GetShape();
  dx->ShareDataWith(dout);
  dx->Resize(shape);
}

// Registers a view op (X -> Out, any dtype) and its `<type>_grad`
// (X, Out@GRAD -> X@GRAD, float dtypes) whose output shape is
// shape_of(X's shape, op attributes, where). add_attrs declares the op's
// attributes (before the grad op copies them).
template <typename ShapeFn, typename AttrFn>
OpBuilder& RegisterViewOp(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                          int line, ShapeFn shape_of, AttrFn add_attrs) {
  OpBuilder& b = registrar.Op(type, file, line);
  add_attrs(b);
  b.Doc(doc)
      .Input("X", "(Tensor) the input")
      .Output("Out", "(Tensor) X's elements in the new shape")
      .InferShape([shape_of](InferShapeContext& c) {
        c.SetOutputShape("Out", shape_of(c.InputShape("X"), c.Op(), c.Where()));
        c.SetOutputDType("Out", c.InputDType("X"));
      })
      .template GradMaker<GradFromInputsMaker>();
  registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool})
    registrar.Kernel(
        type, DeviceType::kCPU, t,
        [shape_of](const ExecutionContext& ctx) {
          ViewAs(ctx, "X", "Out", shape_of(ctx.Input("X").GetShape(), ctx.Op(), StrCat("op '", ctx.Op().Type(), "'")));
        },
        file, line);
  for (DType t : {DType::kFloat32, DType::kFloat64})
    registrar.Kernel(type + "_grad", DeviceType::kCPU, t, ViewGradKernel, file, line);
  return b;
}

// Builds one op of type `type` for a grad maker that expresses a gradient
// with existing ops (minus, sum, scale, transpose, cast, assign).
inline std::unique_ptr<OpDesc> MakeOp(std::string type, VarNameMap inputs, VarNameMap outputs,
                                      AttributeMap attrs = {}) {
  return std::make_unique<OpDesc>(std::move(type), std::move(inputs), std::move(outputs), std::move(attrs));
}

}  // namespace nabla::math_ops
