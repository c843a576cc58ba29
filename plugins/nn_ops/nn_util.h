#pragma once
// Helpers shared by the nn_ops files; private to this plugin (not installed).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::nn {

// Registers one CPU kernel per floating dtype; every nn op computes in the
// dtype of its float inputs.
inline void RegisterFloatKernels(Registrar& r, const std::string& type, KernelFn f32, KernelFn f64, const char* file,
                                 int line) {
  r.Kernel(type, DeviceType::kCPU, DType::kFloat32, std::move(f32), file, line);
  r.Kernel(type, DeviceType::kCPU, DType::kFloat64, std::move(f64), file, line);
}

// f(i) for every i in [0, n): elementwise kernels and optimizers, split over
// the executor's threads when n is large (cpu::ParallelFor). f(i) must write
// element i only.
template <typename F>
void ParallelElementwise(int64_t n, F&& f) {
  cpu::ParallelFor(n, cpu::kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// Maps a Paddle-style axis (negative counts from the end) into [0, rank).
inline int NormalizeAxis(int axis, size_t rank, const std::string& where) {
  const int r = static_cast<int>(rank);
  NABLA_ENFORCE(axis >= -r && axis < r, kOutOfRange, where, ": attribute axis must be in [", -r, ", ", r,
                ") for an input of rank ", r, ", but received ", axis);
  return axis < 0 ? axis + r : axis;
}

// Product of dims [begin, end); -1 when any of them is unknown.
inline int64_t DimProduct(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) {
    if (shape[i] < 0) return -1;
    n *= shape[i];
  }
  return n;
}

// A tensor seen as [outer, dim, inner] around one axis: how axis-wise ops
// (softmax, concat, split, top_k) walk memory.
struct AxisView {
  int64_t outer, dim, inner;
};

inline AxisView ViewAround(const Shape& shape, int axis) {
  return {DimProduct(shape, 0, axis), shape[axis], DimProduct(shape, axis + 1, shape.size())};
}

// True when two dims may be equal: at build time -1 matches anything.
inline bool DimsCompatible(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

// The element of a one-element float tensor (LearningRate, Beta1Pow, ...),
// whatever its floating dtype: optimizer inputs often mix float32 scalars
// with float64 parameters.
inline double ReadScalar(const Tensor& t, const std::string& op, const std::string& slot) {
  NABLA_ENFORCE(t.Numel() == 1, kInvalidArgument, "op '", op, "': input ", slot,
                " must hold exactly one element, but received shape ", ShapeToString(t.GetShape()));
  switch (t.GetDType()) {
    case DType::kFloat32:
      return t.Data<float>()[0];
    case DType::kFloat64:
      return t.Data<double>()[0];
    default:
      NABLA_THROW(kInvalidArgument, "op '", op, "': input ", slot, " must be float32 or float64, but received ",
                  DTypeName(t.GetDType()));
  }
}

// Writes `value` into a one-element tensor of dtype float32 or float64.
inline void WriteScalar(Tensor& t, double value) {
  if (t.GetDType() == DType::kFloat64)
    t.MutableData<double>()[0] = value;
  else
    t.MutableData<float>()[0] = static_cast<float>(value);
}

// Index inputs (Label, Ids, Indices) are int64 as in Paddle; int32 is
// accepted too because feeds from NumPy are often int32.
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.GetDType() == DType::kInt32 ? static_cast<int64_t>(t.Data<int32_t>()[i]) : t.Data<int64_t>()[i];
}

inline void EnforceIndexDType(DType d, const std::string& where, const std::string& slot) {
  NABLA_ENFORCE(d == DType::kInt64 || d == DType::kInt32, kInvalidArgument, where, ": input ", slot,
                " must be int64 (or int32), but received ", DTypeName(d));
}

inline void EnforceFloatDType(DType d, const std::string& where, const std::string& slot) {
  NABLA_ENFORCE(IsFloating(d), kInvalidArgument, where, ": input ", slot, " must be float32 or float64, but received ",
                DTypeName(d));
}

// Shape inference shared by the optimizers: ParamOut (and every other
// `<slot>Out` named in `state`) takes its input's shape and dtype; Grad must
// have Param's shape and LearningRate one element.
inline void InferOptimizer(InferShapeContext& c, const std::vector<std::string>& state) {
  const Shape param = c.InputShape("Param");
  const Shape grad = c.InputShape("Grad");
  EnforceFloatDType(c.InputDType("Param"), c.Where(), "Param");
  NABLA_ENFORCE(c.InputDType("Grad") == c.InputDType("Param"), kInvalidArgument, c.Where(),
                ": Grad must have Param's dtype ", DTypeName(c.InputDType("Param")), ", but received ",
                DTypeName(c.InputDType("Grad")));
  bool same = param.size() == grad.size();
  for (size_t i = 0; same && i < param.size(); ++i) same = DimsCompatible(param[i], grad[i]);
  NABLA_ENFORCE(same, kInvalidArgument, c.Where(), ": Grad must have Param's shape ", ShapeToString(param),
                ", but received ", ShapeToString(grad));
  const Shape lr = c.InputShape("LearningRate");
  const int64_t lr_n = NumElements(lr);
  NABLA_ENFORCE(lr_n == 1 || lr_n < 0, kInvalidArgument, c.Where(),
                ": LearningRate must hold exactly one element, but received shape ", ShapeToString(lr));
  EnforceFloatDType(c.InputDType("LearningRate"), c.Where(), "LearningRate");
  c.ShareShapeAndDType("Param", "ParamOut");
  for (const auto& slot : state) {
    const Shape s = c.InputShape(slot);
    NABLA_ENFORCE(NumElements(s) < 0 || NumElements(param) < 0 || NumElements(s) == NumElements(param),
                  kInvalidArgument, c.Where(), ": ", slot, " must have Param's shape ", ShapeToString(param),
                  ", but received ", ShapeToString(s));
    c.ShareShapeAndDType(slot, slot + "Out");
  }
}

// Marks grad-op input slots whose buffers the kernel never reads (it wants
// the shape only), so executors may free them early.
inline void MarkNoBuffer(OpBuilder& b, const std::vector<std::string>& slots) {
  for (auto& s : b.Info().schema.inputs)
    for (const auto& name : slots)
      if (s.name == name) s.no_buffer = true;
}

// ------------------------------------------------ gradient-check inputs

// A float64 input drawn uniformly from [low, high) whose gradient is checked.
inline GradCheckInput FloatIn(std::string slot, Shape shape, double low = -1.0, double high = 1.0) {
  GradCheckInput in;
  in.slot = std::move(slot);
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}

// The same, kept `margin` away from the points where the op has a kink.
inline GradCheckInput AwayFrom(GradCheckInput in, std::vector<double> kinks, double margin) {
  in.kinks = std::move(kinks);
  in.kink_margin = margin;
  return in;
}

// An input whose gradient is not checked (labels, soft targets).
inline GradCheckInput NoCheck(GradCheckInput in) {
  in.check = false;
  return in;
}

// int64 class or row indices in [0, high), or the given values.
inline GradCheckInput IndexIn(std::string slot, Shape shape, int64_t high, std::vector<double> values = {}) {
  GradCheckInput in = NoCheck(FloatIn(std::move(slot), std::move(shape), 0.0, static_cast<double>(high)));
  in.dtype = DType::kInt64;
  in.values = std::move(values);
  return in;
}

// One grad op for a maker to return.
inline std::vector<std::unique_ptr<OpDesc>> OneOp(std::string type, VarNameMap inputs, VarNameMap outputs,
                                                  AttributeMap attrs) {
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::make_unique<OpDesc>(std::move(type), std::move(inputs), std::move(outputs), std::move(attrs)));
  return ops;
}

// Grad ops of elementwise activations: dX has the shape and dtype of the
// slot the grad op reads (X or Out).
inline void InferSameAs(InferShapeContext& c, const std::string& in, const std::string& out) {
  if (c.HasOutput(out)) c.ShareShapeAndDType(in, out);
}

// Uniform double in [0, 1) from 53 random bits: the distribution is fixed by
// this code, not by the standard library, so masks reproduce across
// toolchains.
inline double UniformFromBits(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Grad ops read their dtype from the incoming gradient: their first input
// slots may be absent (dispensable) or integer (Label, Ids).
inline KernelDTypeFn DTypeOfInput(std::string slot) {
  return [slot](const ExecutionContext& c) { return c.Input(slot).GetDType(); };
}

// `<fwd>_grad` reading only Out and Out@GRAD: activations whose derivative
// is a function of their output (relu, sigmoid, tanh, softmax), so X can be
// freed after the forward pass, as in Paddle.
class GradFromOutMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp(ForwardOp().Type() + "_grad", {{"Out", Output("Out")}, {GradVarName("Out"), OutputGrad("Out")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

}  // namespace nabla::nn
