#pragma once
// Helpers for the op test table: host tensors of doubles, running one op of
// a loaded plugin through nabla::RunOp, and naive index math for references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

namespace nabla::op_test {

// A tensor as the test sees it: a shape and row-major doubles.
struct HostTensor {
  Shape shape;
  std::vector<double> v;
  int64_t Numel() const { return NumElements(shape); }
};

inline void LoadStandardPlugins() {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
}

template <typename T>
void Store(const HostTensor& h, Tensor& t) {
  T* p = t.Allocate<T>(HostDevice(), h.shape);
  for (size_t i = 0; i < h.v.size(); ++i) p[i] = static_cast<T>(h.v[i]);
}
template <>
inline void Store<bfloat16>(const HostTensor& h, Tensor& t) {
  bfloat16* p = t.Allocate<bfloat16>(HostDevice(), h.shape);
  for (size_t i = 0; i < h.v.size(); ++i) p[i] = FloatToBf16(static_cast<float>(h.v[i]));
}

inline void ToTensor(const HostTensor& h, DType dtype, Tensor& t) {
  switch (dtype) {
    case DType::kFloat32:
      Store<float>(h, t);
      break;
    case DType::kFloat64:
      Store<double>(h, t);
      break;
    case DType::kInt32:
      Store<int32_t>(h, t);
      break;
    case DType::kInt64:
      Store<int64_t>(h, t);
      break;
    case DType::kBool:
      Store<bool>(h, t);
      break;
    case DType::kBFloat16:
      Store<bfloat16>(h, t);
      break;
  }
}

template <typename T>
std::vector<double> Load(const Tensor& t) {
  const T* p = t.Data<T>();
  return std::vector<double>(p, p + t.Numel());
}
template <>
inline std::vector<double> Load<bfloat16>(const Tensor& t) {
  const bfloat16* p = t.Data<bfloat16>();
  std::vector<double> v(t.Numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = Bf16ToFloat(p[i]);
  return v;
}

inline HostTensor FromTensor(const Tensor& t) {
  HostTensor h{t.GetShape(), {}};
  switch (t.GetDType()) {
    case DType::kFloat32:
      h.v = Load<float>(t);
      break;
    case DType::kFloat64:
      h.v = Load<double>(t);
      break;
    case DType::kInt32:
      h.v = Load<int32_t>(t);
      break;
    case DType::kInt64:
      h.v = Load<int64_t>(t);
      break;
    case DType::kBool:
      h.v = Load<bool>(t);
      break;
    case DType::kBFloat16:
      h.v = Load<bfloat16>(t);
      break;
  }
  return h;
}

// Values as the dtype stores them, so references see what the kernel sees.
inline double RoundTo(DType dtype, double x) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<float>(x);
    case DType::kInt32:
    case DType::kInt64:
      return std::floor(x);
    case DType::kBool:
      return x != 0.0 ? 1.0 : 0.0;
    default:
      return x;
  }
}

inline HostTensor RandomTensor(Shape shape, DType dtype, double low, double high, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(low, high);
  HostTensor h{std::move(shape), {}};
  h.v.resize(static_cast<size_t>(h.Numel()));
  for (double& x : h.v) x = RoundTo(dtype, u(rng));
  return h;
}

// One op run in a fresh scope: inputs (slot, tensor, dtype) become vars
// named slot_i, outputs are read back per (slot, count).
struct OpRun {
  std::string type;
  std::vector<std::pair<std::string, std::vector<HostTensor>>> inputs;
  std::vector<DType> input_dtypes;  // one per input slot
  AttributeMap attrs;
  std::vector<std::pair<std::string, int>> outputs = {{"Out", 1}};
  uint64_t seed = 0;

  // Output tensors in (slot name, index) order, plus the dtype of each.
  std::vector<HostTensor> Run(std::vector<DType>* out_dtypes = nullptr) const {
    OpDesc op;
    op.SetType(type);
    Scope scope;
    for (size_t s = 0; s < inputs.size(); ++s) {
      std::vector<std::string> names;
      for (size_t i = 0; i < inputs[s].second.size(); ++i) {
        std::string name = inputs[s].first + "_" + std::to_string(i);
        ToTensor(inputs[s].second[i], input_dtypes.at(s), scope.Var(name)->GetTensor());
        names.push_back(name);
      }
      op.SetInput(inputs[s].first, names);
    }
    for (const auto& [slot, count] : outputs) {
      std::vector<std::string> names;
      for (int i = 0; i < count; ++i) names.push_back("out_" + slot + "_" + std::to_string(i));
      op.SetOutput(slot, names);
    }
    op.MutableAttrs() = attrs;
    FillDefaultAttrs(op, *CurrentRegistry());
    ExecutorOptions options;
    options.seed = seed;
    RunContext run;
    run.options = &options;
    RunOp(op, scope, HostDevice(), run);
    std::vector<HostTensor> result;
    for (const auto& [slot, names] : op.Outputs()) {
      (void)slot;
      for (const auto& name : names) {
        const Tensor& t = scope.FindVar(name)->GetTensor();
        if (out_dtypes) out_dtypes->push_back(t.GetDType());
        result.push_back(FromTensor(t));
      }
    }
    return result;
  }
};

// ---------------------------------------------------------------- naive index math

inline std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  return idx;
}

inline int64_t Ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k) flat = flat * shape[k] + idx[k];
  return flat;
}

// Expects `got` to equal `want` within atol + rtol * |want| per element.
inline void ExpectNear(const HostTensor& got, const HostTensor& want, double rtol, double atol,
                       const std::string& what) {
  ASSERT_EQ(got.shape, want.shape) << what << ": shape " << ShapeToString(got.shape) << " vs expected "
                                   << ShapeToString(want.shape);
  ASSERT_EQ(got.v.size(), want.v.size()) << what;
  for (size_t i = 0; i < want.v.size(); ++i) {
    ASSERT_NEAR(got.v[i], want.v[i], atol + rtol * std::abs(want.v[i])) << what << " at element " << i;
  }
}

}  // namespace nabla::op_test
