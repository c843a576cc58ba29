// Numeric gradient checks (Paddle's check_grad): one forward op in float64,
// random upstream gradients dOut, the analytic input gradients from running
// the op's own grad ops, and central differences of sum(Out * dOut).
#include "nabla/gradcheck.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "gradcheck_internal.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"

namespace nabla {
namespace internal {

// ---------------------------------------------------------------- tensors <-> host doubles

template <typename T>
void ToHost(const void* data, int64_t n, std::vector<double>* out) {
  const T* p = static_cast<const T*>(data);
  for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<double>(p[i]);
}

template <typename T>
void FromHost(const std::vector<double>& values, std::vector<char>* bytes) {
  bytes->resize(values.size() * sizeof(T));
  T* p = reinterpret_cast<T*>(bytes->data());
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
}

// Allocates `t` on `device` and fills it (values converted to `dtype`).
void WriteTensor(Tensor& t, Device& device, DType dtype, const Shape& shape, const std::vector<double>& values) {
  std::vector<char> bytes;
  switch (dtype) {
    case DType::kFloat32:
      FromHost<float>(values, &bytes);
      break;
    case DType::kFloat64:
      FromHost<double>(values, &bytes);
      break;
    case DType::kInt32:
      FromHost<int32_t>(values, &bytes);
      break;
    case DType::kInt64:
      FromHost<int64_t>(values, &bytes);
      break;
    case DType::kBool: {
      bytes.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) bytes[i] = values[i] != 0.0;
      break;
    }
    case DType::kBFloat16: {
      bytes.resize(values.size() * sizeof(bfloat16));
      auto* p = reinterpret_cast<bfloat16*>(bytes.data());
      for (size_t i = 0; i < values.size(); ++i) p[i] = FloatToBf16(static_cast<float>(values[i]));
      break;
    }
  }
  // A fresh tensor: never write through a buffer another var shares.
  t = Tensor();
  void* data = t.Allocate(device, dtype, shape);
  if (!bytes.empty()) device.CopyFromHost(data, bytes.data(), bytes.size());
}

std::vector<double> ReadTensor(const Tensor& t) {
  int64_t n = t.Numel();
  std::vector<char> bytes(t.Bytes());
  if (!bytes.empty()) {
    Device* d = t.GetDevice();
    if (d->Type() == DeviceType::kCPU)
      std::copy_n(static_cast<const char*>(t.RawData()), bytes.size(), bytes.data());
    else
      d->CopyToHost(bytes.data(), t.RawData(), bytes.size());
  }
  std::vector<double> out(static_cast<size_t>(n));
  switch (t.GetDType()) {
    case DType::kFloat32:
      ToHost<float>(bytes.data(), n, &out);
      break;
    case DType::kFloat64:
      ToHost<double>(bytes.data(), n, &out);
      break;
    case DType::kInt32:
      ToHost<int32_t>(bytes.data(), n, &out);
      break;
    case DType::kInt64:
      ToHost<int64_t>(bytes.data(), n, &out);
      break;
    case DType::kBool:
      ToHost<bool>(bytes.data(), n, &out);
      break;
    case DType::kBFloat16: {
      const auto* p = reinterpret_cast<const bfloat16*>(bytes.data());
      out.resize(static_cast<size_t>(n));
      for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToFloat(p[i]);
      break;
    }
  }
  return out;
}

std::vector<double> RandomCaseValues(const std::string& op_type, const GradCheckSpec& case_spec,
                                     const GradCheckInput& spec, DType dtype, std::mt19937_64& rng) {
  NABLA_ENFORCE(spec.low < spec.high, kInvalidArgument, "grad check '", case_spec.name, "' of op '", op_type,
                "': input ", spec.slot, " needs low < high, but received [", spec.low, ", ", spec.high, ")");
  std::uniform_real_distribution<double> uniform(spec.low, spec.high);
  std::vector<double> v(static_cast<size_t>(std::max<int64_t>(NumElements(spec.shape), 0)));
  for (double& x : v) {
    for (int tries = 0;; ++tries) {
      NABLA_ENFORCE(tries < 1000, kInvalidArgument, "grad check '", case_spec.name, "' of op '", op_type, "': input ",
                    spec.slot, " found no value in [", spec.low, ", ", spec.high, ") at least ", spec.kink_margin,
                    " away from its kinks");
      x = uniform(rng);
      if (!IsFloating(dtype)) x = std::floor(x);
      bool near_kink = false;
      for (double k : spec.kinks) near_kink = near_kink || std::abs(x - k) < spec.kink_margin;
      if (!near_kink) break;
    }
  }
  return v;
}

}  // namespace internal
namespace {

using internal::ReadTensor;
using internal::WriteTensor;

// ---------------------------------------------------------------- the check

struct CheckedInput {
  std::string slot;
  std::string name;
  Shape shape;
  DType dtype;
  std::vector<double> values;
  bool check;
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class GradChecker {
 public:
  GradChecker(const std::string& op_type, const GradCheckSpec& spec, Device& device, uint64_t seed)
      : op_type_(op_type), spec_(spec), device_(device), rng_(seed) {
    options_.seed = seed;
    run_.program = &program_;
    run_.options = &options_;
  }

  GradCheckResult Run() {
    GradCheckResult result;
    result.op_type = op_type_;
    result.case_name = spec_.name;
    try {
      Check(result);
    } catch (const std::exception& e) {
      result.failures.push_back(StrCat("the check could not run: ", e.what()));
    }
    result.ok = result.failures.empty();
    return result;
  }

 private:
  void Check(GradCheckResult& result) {
    registry_ = CurrentRegistry();
    const OpInfo& info = registry_->Get(op_type_);
    NABLA_ENFORCE(info.grad_maker != nullptr, kPreconditionNotMet, "op '", op_type_,
                  "' registers no GradOpDescMaker, so it has no gradient to check");
    BuildForwardOp(info);
    RunOp(fwd_, scope_, device_, run_);
    SeedOutputGrads();
    std::map<std::string, std::vector<double>> analytic = AnalyticGrads(info);
    for (const CheckedInput& in : inputs_) {
      if (!in.check) continue;
      auto it = analytic.find(in.name);
      if (it == analytic.end()) {
        result.failures.push_back(
            StrCat(in.slot, " (", in.name, "): the grad ops did not produce ", GradVarName(in.name)));
        continue;
      }
      Compare(in, it->second, NumericGrad(in), result);
    }
  }

  // The forward op with vars x0, x1, ... per input slot and out0, ... per
  // output slot, float inputs in float64.
  void BuildForwardOp(const OpInfo& info) {
    std::set<std::string> used;
    auto unique = [&used](std::string name) {
      while (!used.insert(name).second) name += "_";
      return name;
    };
    VarNameMap inputs, outputs;
    for (const GradCheckInput& spec : spec_.inputs) {
      for (int j = 0; j < spec.count; ++j) {
        CheckedInput in;
        in.slot = spec.slot;
        in.name = unique(Lower(spec.slot) + std::to_string(inputs[spec.slot].size()));
        in.shape = spec.shape;
        in.dtype = IsFloating(spec.dtype) ? DType::kFloat64 : spec.dtype;
        in.check = spec.check && IsFloating(in.dtype);
        in.values = spec.values.empty() ? RandomValues(spec, in.dtype) : spec.values;
        NABLA_ENFORCE(static_cast<int64_t>(in.values.size()) == NumElements(in.shape), kInvalidArgument, "grad check '",
                      spec_.name, "' of op '", op_type_, "': input ", spec.slot, " of shape ", ShapeToString(in.shape),
                      " needs ", NumElements(in.shape), " values, but received ", in.values.size());
        inputs[spec.slot].push_back(in.name);
        WriteTensor(scope_.Var(in.name)->GetTensor(), device_, in.dtype, in.shape, in.values);
        inputs_.push_back(std::move(in));
      }
    }
    std::vector<std::pair<std::string, int>> out_slots = spec_.outputs;
    if (out_slots.empty())
      for (const SlotDef& s : info.schema.outputs)
        if (!s.dispensable) out_slots.emplace_back(s.name, 1);
    for (const auto& [slot, count] : out_slots) {
      for (int j = 0; j < count; ++j) {
        std::string name = unique(Lower(slot) + std::to_string(j));
        outputs[slot].push_back(name);
        bool graded =
            std::find(spec_.no_grad_outputs.begin(), spec_.no_grad_outputs.end(), slot) == spec_.no_grad_outputs.end();
        if (graded) graded_outputs_.push_back(name);
      }
    }
    fwd_ = OpDesc(op_type_, inputs, outputs, spec_.attrs);
    FillDefaultAttrs(fwd_, *registry_);
  }

  std::vector<double> RandomValues(const GradCheckInput& spec, DType dtype) {
    return internal::RandomCaseValues(op_type_, spec_, spec, dtype, rng_);
  }

  // Random dOut for every float output that is graded; sum(Out * dOut) is
  // the scalar both gradients are taken of.
  void SeedOutputGrads() {
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::vector<std::string> float_outputs;
    for (const std::string& name : graded_outputs_) {
      Variable* v = scope_.FindVar(name);
      NABLA_ENFORCE(v && v->GetTensor().IsInitialized(), kPreconditionNotMet, "op '", op_type_,
                    "' did not write its output '", name, "'");
      const Tensor& out = v->GetTensor();
      if (!IsFloating(out.GetDType())) continue;
      std::vector<double> g(static_cast<size_t>(out.Numel()));
      for (double& x : g) x = uniform(rng_);
      WriteTensor(scope_.Var(GradVarName(name))->GetTensor(), device_, out.GetDType(), out.GetShape(), g);
      out_grads_[name] = std::move(g);
      float_outputs.push_back(name);
    }
    graded_outputs_ = float_outputs;
  }

  std::map<std::string, std::vector<double>> AnalyticGrads(const OpInfo& info) {
    std::unordered_set<std::string> no_grad;
    for (const CheckedInput& in : inputs_)
      if (!in.check) no_grad.insert(in.name);
    std::unordered_map<std::string, std::string> grad_to_var;
    std::vector<std::unique_ptr<OpDesc>> grad_ops = info.grad_maker(fwd_, no_grad, &grad_to_var, {});
    for (auto& op : grad_ops) {
      FillDefaultAttrs(*op, *registry_);
      // Gradients of outputs that get no dOut read as zeros, as the backward
      // builder's fill_zeros_like would make them.
      for (const std::string& name : op->InputArgumentNames()) {
        if (name == kEmptyVarName || scope_.FindVar(name)) continue;
        std::string fwd_name = StripGradSuffix(name);
        Variable* fwd_var = IsGradVarName(name) ? scope_.FindVar(fwd_name) : nullptr;
        NABLA_ENFORCE(fwd_var != nullptr, kNotFound, "grad op '", op->Type(), "' of '", op_type_, "' reads '", name,
                      "', which is neither a forward var nor a gradient");
        const Tensor& f = fwd_var->GetTensor();
        WriteTensor(scope_.Var(name)->GetTensor(), device_, f.GetDType(), f.GetShape(),
                    std::vector<double>(static_cast<size_t>(f.Numel()), 0.0));
      }
      RunOp(*op, scope_, device_, run_);
    }
    std::map<std::string, std::vector<double>> grads;
    for (const CheckedInput& in : inputs_) {
      if (!in.check) continue;
      Variable* v = scope_.FindVar(GradVarName(in.name));
      if (!v || !v->GetTensor().IsInitialized()) continue;
      const Tensor& g = v->GetTensor();
      NABLA_ENFORCE(g.GetShape() == in.shape, kInvalidArgument, "op '", op_type_, "': expected ", GradVarName(in.name),
                    " of the shape of ", in.name, ", ", ShapeToString(in.shape), ", but received ",
                    ShapeToString(g.GetShape()));
      grads[in.name] = ReadTensor(g);
    }
    return grads;
  }

  double Objective() {
    RunOp(fwd_, scope_, device_, run_);
    double f = 0.0;
    for (const std::string& name : graded_outputs_) {
      std::vector<double> out = ReadTensor(scope_.FindVar(name)->GetTensor());
      const std::vector<double>& g = out_grads_.at(name);
      NABLA_ENFORCE(out.size() == g.size(), kInvalidArgument, "op '", op_type_, "': output '", name,
                    "' changed its size between runs (", g.size(), " then ", out.size(), " elements)");
      for (size_t i = 0; i < out.size(); ++i) f += out[i] * g[i];
    }
    return f;
  }

  std::vector<double> NumericGrad(const CheckedInput& in) {
    std::vector<double> values = in.values;
    std::vector<double> grad(values.size());
    Tensor& t = scope_.FindVar(in.name)->GetTensor();
    for (size_t i = 0; i < values.size(); ++i) {
      double orig = values[i];
      values[i] = orig + spec_.delta;
      WriteTensor(t, device_, in.dtype, in.shape, values);
      double plus = Objective();
      values[i] = orig - spec_.delta;
      WriteTensor(t, device_, in.dtype, in.shape, values);
      double minus = Objective();
      values[i] = orig;
      grad[i] = (plus - minus) / (2.0 * spec_.delta);
    }
    WriteTensor(t, device_, in.dtype, in.shape, values);
    return grad;
  }

  // Paddle's rule: the error is relative to |numeric|, except where
  // |numeric| < abs_threshold, where it is absolute.
  void Compare(const CheckedInput& in, const std::vector<double>& analytic, const std::vector<double>& numeric,
               GradCheckResult& result) {
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < numeric.size(); ++i) {
      double scale = std::abs(numeric[i]) < spec_.abs_threshold ? 1.0 : std::abs(numeric[i]);
      double err = std::abs(analytic[i] - numeric[i]) / scale;
      if (std::isnan(err)) err = std::numeric_limits<double>::infinity();
      if (err > worst) {
        worst = err;
        at = i;
      }
    }
    result.max_error = std::max(result.max_error, worst);
    if (worst > spec_.max_relative_error)
      result.failures.push_back(StrCat(in.slot, " (", in.name, ", shape ", ShapeToString(in.shape), "): max error ",
                                       worst, " at element ", at, " (analytic ", analytic[at], ", numeric ",
                                       numeric[at], ") exceeds ", spec_.max_relative_error));
  }

  const std::string& op_type_;
  const GradCheckSpec& spec_;
  Device& device_;
  std::mt19937_64 rng_;
  std::shared_ptr<const OpRegistry> registry_;
  ProgramDesc program_;
  ExecutorOptions options_;
  RunContext run_;
  Scope scope_;
  OpDesc fwd_;
  std::vector<CheckedInput> inputs_;
  std::vector<std::string> graded_outputs_;
  std::map<std::string, std::vector<double>> out_grads_;
};

// Whether the op's maker emits any grad op for an instance with one var per
// slot: EmptyGradOpDescMaker (fill_constant, random ops, optimizers) emits
// none. Attributes the probe cannot default are left out; a maker that
// cannot run without them counts as having a gradient.
bool MakesGradOps(const OpInfo& info, const OpRegistry& registry) {
  if (!info.grad_maker) return false;
  VarNameMap inputs, outputs;
  for (const SlotDef& s : info.schema.inputs) inputs[s.name] = {Lower(s.name)};
  for (const SlotDef& s : info.schema.outputs) outputs[s.name] = {Lower(s.name) + "_out"};
  OpDesc op(info.schema.type, inputs, outputs, {});
  for (const AttrDef& a : info.schema.attrs)
    if (a.default_value) op.SetAttr(a.name, *a.default_value);
  try {
    return !info.grad_maker(op, {}, nullptr, {}).empty();
  } catch (const std::exception&) {
    return true;
  }
}

}  // namespace

GradCheckResult CheckGradient(const std::string& op_type, const GradCheckSpec& spec, Device& device, uint64_t seed) {
  return GradChecker(op_type, spec, device, seed).Run();
}

std::vector<GradCheckResult> CheckOpGradients(const std::string& op_type, Device& device) {
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(op_type);
  std::vector<GradCheckResult> results;
  if (info.grad_checks.empty()) {
    // A case is one op over dense inputs; an op that runs a sub-block or
    // works on tensor arrays has its gradient checked through whole programs.
    bool runs_blocks = info.traits.has_sub_block || info.traits.control_flow || info.traits.array_io;
    if (!runs_blocks && MakesGradOps(info, *registry)) {
      GradCheckResult r;
      r.op_type = op_type;
      r.ok = false;
      r.failures.push_back(StrCat("op '", op_type, "' has a gradient but registers no GradCheck case (",
                                  info.origin.ToString(), "): add .GradCheck(...) next to its registration"));
      results.push_back(std::move(r));
    }
    return results;
  }
  for (const GradCheckSpec& spec : info.grad_checks) results.push_back(CheckGradient(op_type, spec, device));
  return results;
}

}  // namespace nabla
