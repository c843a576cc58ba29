// `nabla opcheck` (nabla/opcheck.h): each GradCheck case of an op run as
// the op and its grad ops through an executor, in checked mode, once per
// device, floating dtype, thread count and edge variant, every result
// compared bit for bit with the first.
#include "nabla/opcheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "gradcheck_internal.h"
#include "nabla/checked.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

using internal::ReadTensor;
using internal::WriteTensor;

struct Snapshot {
  Shape shape;
  DType dtype = DType::kFloat32;
  std::vector<char> bits;
  std::vector<double> values;
};
using Snapshots = std::map<std::string, Snapshot>;

Snapshot Take(const Tensor& t) {
  Snapshot s;
  s.shape = t.GetShape();
  s.dtype = t.GetDType();
  s.bits.resize(t.Bytes());
  if (!s.bits.empty()) {
    Device* d = t.GetDevice();
    if (d->Type() == DeviceType::kCPU) {
      std::memcpy(s.bits.data(), t.RawData(), s.bits.size());
    } else {
      d->CopyToHost(s.bits.data(), t.RawData(), s.bits.size());
    }
  }
  s.values = ReadTensor(t);
  return s;
}

std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A case whose attributes name a dtype (cast's out_dtype) is meant for the
// float64 inputs gradcheck gives it.
bool NamesADType(const GradCheckSpec& spec) {
  for (const auto& [name, value] : spec.attrs) {
    DType d;
    if (const auto* s = std::get_if<std::string>(&value); s && ParseDType(*s, &d)) return true;
  }
  return false;
}

// Turns checked mode on for the checks and back to what it was after.
class CheckedScope {
 public:
  CheckedScope() : before_(CheckedMode()) { SetCheckedMode(true); }
  ~CheckedScope() { SetCheckedMode(before_); }

 private:
  bool before_;
};

// The outputs of one run of a case: the forward op's, then the grad ops'.
struct CaseResult {
  Snapshots forward;
  Snapshots grads;
  std::vector<std::string> problems;        // inputs changed
  std::vector<std::string> maker_problems;  // grad ops invalid against their schemas
};

// One case as a program of the forward op, and one of its grad ops, run on
// a fresh scope with an executor of `threads` threads. A failure inside is
// thrown as an Error saying which part ("forward", "grad ops") failed.
class CaseRunner {
 public:
  CaseRunner(const std::string& type, const GradCheckSpec& spec, Device& device, DType dtype, uint64_t seed)
      : type_(type), spec_(spec), device_(device), dtype_(dtype), seed_(seed) {}

  CaseResult Run(int threads) {
    registry_ = CurrentRegistry();
    const OpInfo& info = registry_->Get(type_);
    CaseResult result;
    Scope scope;
    std::mt19937_64 rng(seed_);
    ExecutorOptions options;
    options.threads = threads;
    options.seed = seed_;
    std::unique_ptr<Executor> executor = CreateExecutor("sequential", device_, options);

    ProgramDesc forward;
    std::vector<std::string> graded;
    std::unordered_set<std::string> no_grad;
    OpDesc fwd = BuildForwardOp(info, scope, rng, &graded, &no_grad);
    forward.Root()->AppendOp(fwd);
    Phase("forward", [&] { executor->Run(forward, 0, scope); });
    for (const auto& [slot, args] : fwd.Outputs())
      for (const std::string& name : args) {
        Variable* v = scope.FindVar(name);
        if (v && v->Type() == VarType::kDense && v->GetTensor().IsInitialized())
          result.forward[name] = Take(v->GetTensor());
      }
    CheckInputs(scope, "forward", &result.problems);
    if (!info.HasGradient()) return result;

    // Random dOut for every float output that is graded.
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (const std::string& name : graded) {
      auto it = result.forward.find(name);
      if (it == result.forward.end() || !IsFloating(it->second.dtype)) continue;
      std::vector<double> g(it->second.values.size());
      for (double& x : g) x = uniform(rng);
      WriteTensor(scope.Var(GradVarName(name))->GetTensor(), device_, it->second.dtype, it->second.shape, g);
    }
    std::unordered_map<std::string, std::string> grad_to_var;
    std::vector<std::unique_ptr<OpDesc>> grad_ops;
    Phase("grad maker", [&] { grad_ops = info.grad_maker(fwd, no_grad, &grad_to_var, {}); });
    ProgramDesc backward;
    bool valid = true;
    // Vars an earlier grad op of the maker writes (a gradient passed from one
    // grad op to the next, as fc's maker passes its product's).
    std::unordered_set<std::string> written;
    for (size_t i = 0; i < grad_ops.size(); ++i) {
      OpDesc& g = *grad_ops[i];
      const std::string where = StrCat("grad op #", i, " '", g.Type(), "' from the grad maker of '", type_, "' (",
                                       info.origin.ToString(), ")");
      const OpInfo* g_info = registry_->Find(g.Type());
      if (g_info == nullptr) {
        result.maker_problems.push_back(StrCat(where, ": no op '", g.Type(), "' is registered"));
        valid = false;
        continue;
      }
      try {
        FillDefaultAttrs(g, *registry_);
        VerifyOpSchema(g, g_info->schema, where);
      } catch (const Error& e) {
        result.maker_problems.push_back(OneLine(e.what()));
        valid = false;
        continue;
      }
      // Gradients of outputs that get no dOut read as zeros, as the backward
      // builder's fill_zeros_like would make them.
      for (const std::string& name : g.InputArgumentNames()) {
        if (name == kEmptyVarName || scope.FindVar(name) || written.count(name)) continue;
        Variable* fwd_var = IsGradVarName(name) ? scope.FindVar(StripGradSuffix(name)) : nullptr;
        if (fwd_var == nullptr || !fwd_var->GetTensor().IsInitialized()) {
          result.problems.push_back(
              StrCat(where, ": reads '", name, "', which is neither a forward var nor a gradient"));
          valid = false;
          continue;
        }
        const Tensor& f = fwd_var->GetTensor();
        WriteTensor(scope.Var(name)->GetTensor(), device_, f.GetDType(), f.GetShape(),
                    std::vector<double>(static_cast<size_t>(f.Numel()), 0.0));
      }
      for (const std::string& name : g.OutputArgumentNames())
        if (name != kEmptyVarName) written.insert(name);
      backward.Root()->AppendOp(g);
    }
    if (!valid) return result;
    const std::set<std::string> before_grads = Names(scope);
    Phase("grad ops", [&] { executor->Run(backward, 0, scope); });
    for (const auto& op : backward.Root()->AllOps())
      for (const std::string& name : op->OutputArgumentNames()) {
        Variable* v = name == kEmptyVarName || before_grads.count(name) ? nullptr : scope.FindVar(name);
        if (v && v->Type() == VarType::kDense && v->GetTensor().IsInitialized())
          result.grads[name] = Take(v->GetTensor());
      }
    CheckInputs(scope, "grad ops", &result.problems);
    return result;
  }

 private:
  template <typename F>
  static void Phase(const char* phase, F&& f) {
    try {
      f();
    } catch (const Error& e) {
      throw Error(e.kind(), StrCat(phase, ": ", OneLine(e.what())));
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kRuntime, StrCat(phase, ": ", OneLine(e.what())));
    } catch (...) {
      throw Error(ErrorKind::kRuntime, StrCat(phase, ": a non-standard exception (not derived from std::exception)"));
    }
  }

  static std::set<std::string> Names(const Scope& scope) {
    std::set<std::string> names;
    for (const std::string& n : scope.LocalVarNames()) names.insert(n);
    return names;
  }

  OpDesc BuildForwardOp(const OpInfo& info, Scope& scope, std::mt19937_64& rng, std::vector<std::string>* graded,
                        std::unordered_set<std::string>* no_grad) {
    std::set<std::string> used;
    auto unique = [&used](std::string name) {
      while (!used.insert(name).second) name += "_";
      return name;
    };
    VarNameMap inputs, outputs;
    inputs_.clear();
    for (const GradCheckInput& in : spec_.inputs) {
      for (int j = 0; j < in.count; ++j) {
        const std::string name = unique(Lower(in.slot) + std::to_string(inputs[in.slot].size()));
        const DType dtype = IsFloating(in.dtype) ? dtype_ : in.dtype;
        std::vector<double> values =
            in.values.empty() ? internal::RandomCaseValues(type_, spec_, in, DType::kFloat64, rng) : in.values;
        if (!IsFloating(dtype))
          for (double& v : values) v = std::floor(v);
        NABLA_ENFORCE(static_cast<int64_t>(values.size()) == std::max<int64_t>(NumElements(in.shape), 0),
                      kInvalidArgument, "case '", spec_.name, "': input ", in.slot, " of shape ",
                      ShapeToString(in.shape), " needs ", NumElements(in.shape), " values, but received ",
                      values.size());
        inputs[in.slot].push_back(name);
        Tensor& t = scope.Var(name)->GetTensor();
        WriteTensor(t, device_, dtype, in.shape, values);
        inputs_.push_back({in.slot, name, Take(t)});
        if (!in.check || !IsFloating(dtype)) no_grad->insert(name);
      }
    }
    std::vector<std::pair<std::string, int>> out_slots = spec_.outputs;
    if (out_slots.empty())
      for (const SlotDef& s : info.schema.outputs)
        if (!s.dispensable) out_slots.emplace_back(s.name, 1);
    for (const auto& [slot, count] : out_slots)
      for (int j = 0; j < count; ++j) {
        const std::string name = unique(Lower(slot) + "_out" + std::to_string(j));
        outputs[slot].push_back(name);
        if (std::find(spec_.no_grad_outputs.begin(), spec_.no_grad_outputs.end(), slot) == spec_.no_grad_outputs.end())
          graded->push_back(name);
      }
    OpDesc op(type_, inputs, outputs, spec_.attrs);
    FillDefaultAttrs(op, *registry_);
    return op;
  }

  void CheckInputs(Scope& scope, const char* phase, std::vector<std::string>* problems) const {
    for (const FedInput& in : inputs_) {
      Variable* v = scope.FindVar(in.name);
      const Snapshot now = Take(v->GetTensor());
      if (now.bits != in.snapshot.bits || now.shape != in.snapshot.shape)
        problems->push_back(StrCat(phase, ": input ", in.slot, " (var '", in.name,
                                   "') changed, but the op does not declare it updated in place"));
    }
  }

  struct FedInput {
    std::string slot, name;
    Snapshot snapshot;
  };

  const std::string& type_;
  const GradCheckSpec& spec_;
  Device& device_;
  DType dtype_;
  uint64_t seed_;
  std::shared_ptr<const OpRegistry> registry_;
  std::vector<FedInput> inputs_;
};

std::string ElementText(const Snapshot& s, size_t i) {
  if (i >= s.values.size()) return "?";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", s.values[i]);
  return text;
}

// The first difference between two runs, or "".
std::string Difference(const Snapshots& want, const Snapshots& got) {
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) return StrCat("'", name, "' was written by one run only");
    const Snapshot& g = it->second;
    if (g.shape != w.shape || g.dtype != w.dtype)
      return StrCat("'", name, "' is ", DTypeName(w.dtype), ShapeToString(w.shape), " then ", DTypeName(g.dtype),
                    ShapeToString(g.shape));
    if (g.bits == w.bits) continue;
    const size_t width = std::max<size_t>(DTypeSize(w.dtype), 1);
    size_t at = 0;
    while (at * width < w.bits.size() && std::memcmp(&w.bits[at * width], &g.bits[at * width], width) == 0) ++at;
    return StrCat("'", name, "' differs at element ", at, " (", ElementText(w, at), " then ", ElementText(g, at), ")");
  }
  for (const auto& [name, g] : got)
    if (!want.count(name)) return StrCat("'", name, "' was written by one run only");
  return "";
}

bool Declines(const Error& e) {
  return e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kOutOfRange ||
         e.kind() == ErrorKind::kPreconditionNotMet;
}

// The case with its leading dim set to `d` wherever it appears first in an
// input: X [2, 3] with Y [3] stays broadcastable as [0, 3] with [3], a batch
// of X and Label shrinks together. False when nothing would change or an
// input of fixed values would have to.
bool WithLeadingDim(const GradCheckSpec& spec, const OpSchema& schema, int64_t d, GradCheckSpec* out) {
  *out = spec;
  int64_t lead = -1;
  for (const GradCheckInput& in : spec.inputs) {
    const SlotDef* s = schema.FindInput(in.slot);
    if (!in.shape.empty() && !(s && s->no_grad)) {
      lead = in.shape[0];
      break;
    }
  }
  if (lead < 0 || lead == d) return false;
  for (GradCheckInput& in : out->inputs) {
    const SlotDef* s = schema.FindInput(in.slot);
    if (in.shape.empty() || (s && s->no_grad) || in.shape[0] != lead) continue;
    if (!in.values.empty()) return false;
    in.shape[0] = d;
  }
  out->name = StrCat(spec.name, " with leading dim ", d);
  return true;
}

std::vector<DType> FloatDTypes(const OpRegistry& registry, const std::string& type, DeviceType device) {
  std::vector<DType> out;
  for (const auto& [d, dtype] : registry.KernelsOf(type))
    if (d == device && IsFloating(dtype)) out.push_back(dtype);
  return out;
}

std::vector<Device*> DevicesFor(const OpRegistry& registry, const std::string& type, const OpCheckOptions& options,
                                OpCheckReport* report) {
  if (!options.device.empty()) return {&ResolveDevice(options.device)};
  std::set<DeviceType> types;
  for (const auto& [d, dtype] : registry.KernelsOf(type)) types.insert(d);
  std::vector<Device*> out;
  for (DeviceType t : types) {
    if (t == DeviceType::kCPU) {
      out.push_back(&HostDevice());
      continue;
    }
    if (t == NullDeviceType()) continue;
    const std::string backend = DeviceTypeName(t);
    try {
      std::vector<DeviceListing> listings = EnumerateDevices(backend);
      if (listings.empty()) {
        report->notes.push_back(StrCat(type, ": not checked on ", backend, ": no device"));
      } else {
        out.push_back(&ResolveDevice(listings.front().spec));
      }
    } catch (const std::exception& e) {
      report->notes.push_back(StrCat(type, ": not checked on ", backend, ": ", OneLine(e.what())));
    }
  }
  return out;
}

std::string DeviceLabel(const Device& d) {
  return &d == &HostDevice() ? std::string(DeviceTypeName(d.Type())) : StrCat(DeviceTypeName(d.Type()), ":", d.Id());
}

// The grad maker on an instance with one var per slot and default
// attributes: what it emits must be registered ops valid against their
// schemas. Runs for ops without cases too; a maker that needs attributes the
// probe cannot default is left to the cases.
// The op with one var per slot, named after the slot, and its attributes'
// defaults: what a grad maker is asked about.
OpDesc ProbeOp(const OpInfo& info) {
  VarNameMap inputs, outputs;
  for (const SlotDef& s : info.schema.inputs) inputs[s.name] = {Lower(s.name)};
  for (const SlotDef& s : info.schema.outputs) outputs[s.name] = {Lower(s.name) + "_out"};
  OpDesc op(info.schema.type, inputs, outputs, {});
  for (const AttrDef& a : info.schema.attrs)
    if (a.default_value) op.SetAttr(a.name, *a.default_value);
  return op;
}

// The grad ops an op's grad maker emits for a case's attributes (what a
// backward pass would run), or none where the maker cannot be probed.
std::vector<std::string> GradOpTypes(const OpInfo& info, const GradCheckSpec& spec) {
  OpDesc op = ProbeOp(info);
  for (const auto& [name, value] : spec.attrs) op.SetAttr(name, value);
  std::vector<std::string> types;
  try {
    for (const auto& g : info.grad_maker(op, {}, nullptr, {}))
      if (g) types.push_back(g->Type());
  } catch (...) {
    return {};
  }
  return types;
}

// On a device that runs no CPU kernels on host copies, the grad ops of
// `types` with no kernel there for any of `dtypes`: the op runs forward on
// that device but training stops at it, which is the device's scope, not a
// fault of the op's kernels.
std::vector<std::string> GradOpsMissingOn(const OpRegistry& registry, const std::vector<std::string>& types,
                                          const Device& device, const std::vector<DType>& dtypes) {
  std::vector<std::string> missing;
  if (device.Type() == DeviceType::kCPU || HostFallback(device.Type())) return missing;
  for (const std::string& t : types) {
    bool found = false;
    for (DType d : dtypes) found = found || registry.FindKernel(t, device.Type(), d) != nullptr;
    if (!found && std::find(missing.begin(), missing.end(), t) == missing.end()) missing.push_back(t);
  }
  return missing;
}

void ProbeGradMaker(const OpRegistry& registry, const OpInfo& info, const std::string& label,
                    std::vector<std::string>* problems) {
  if (!info.HasGradient()) return;
  // A required attribute has no value to probe with; the cases give one.
  for (const AttrDef& a : info.schema.attrs)
    if (!a.default_value) return;
  const OpDesc op = ProbeOp(info);
  std::vector<std::unique_ptr<OpDesc>> grad_ops;
  try {
    grad_ops = info.grad_maker(op, {}, nullptr, {});
  } catch (...) {
    return;
  }
  for (size_t i = 0; i < grad_ops.size(); ++i) {
    if (!grad_ops[i]) {
      problems->push_back(StrCat(label, ": its grad maker returned a null op"));
      continue;
    }
    OpDesc& g = *grad_ops[i];
    const std::string where = StrCat(label, ": grad op #", i, " '", g.Type(), "' from its grad maker");
    const OpInfo* g_info = registry.Find(g.Type());
    if (!g_info) {
      problems->push_back(StrCat(where, ": no op '", g.Type(), "' is registered"));
      continue;
    }
    try {
      FillDefaultAttrs(g, registry);
      VerifyOpSchema(g, g_info->schema, where);
    } catch (const Error& e) {
      problems->push_back(OneLine(e.what()));
    }
  }
}

}  // namespace

bool IsGradOpOfRegisteredOp(const std::string& type) {
  const std::string suffix = "_grad";
  return type.size() > suffix.size() && type.compare(type.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         CurrentRegistry()->Find(type.substr(0, type.size() - suffix.size())) != nullptr;
}

bool HasFloat32Kernels(const std::string& op_type, Device& device) {
  for (const auto& [d, dtype] : CurrentRegistry()->KernelsOf(op_type))
    if (d == device.Type() && dtype == DType::kFloat32) return true;
  return false;
}

GradCheckResult CheckFloat32Gradient(const std::string& op_type, const GradCheckSpec& spec, Device& device,
                                     uint64_t seed) {
  GradCheckResult result;
  result.op_type = op_type;
  result.case_name = spec.name;
  if (!HasFloat32Kernels(op_type, device) || NamesADType(spec)) return result;
  try {
    CaseResult r32 = CaseRunner(op_type, spec, device, DType::kFloat32, seed).Run(1);
    CaseResult r64 = CaseRunner(op_type, spec, device, DType::kFloat64, seed).Run(1);
    for (const std::string& p : r32.problems) result.failures.push_back("float32: " + p);
    auto compare = [&](const Snapshots& want, const Snapshots& got, const char* what) {
      for (const auto& [name, w] : want) {
        auto it = got.find(name);
        if (it == got.end()) {
          result.failures.push_back(StrCat("float32 ", what, " '", name, "' was not written"));
          continue;
        }
        const Snapshot& g = it->second;
        if (g.shape != w.shape) {
          result.failures.push_back(StrCat("float32 ", what, " '", name, "' has shape ", ShapeToString(g.shape),
                                           ", float64 ", ShapeToString(w.shape)));
          continue;
        }
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < w.values.size(); ++i) {
          // Equal values are no error, infinities too (a row of attention
          // that sees no key has softmax_lse -inf in both).
          double err = g.values[i] == w.values[i]
                           ? 0.0
                           : std::abs(g.values[i] - w.values[i]) / std::max(1.0, std::abs(w.values[i]));
          if (std::isnan(err)) err = std::isnan(g.values[i]) && std::isnan(w.values[i]) ? 0.0 : INFINITY;
          if (err > worst) {
            worst = err;
            at = i;
          }
        }
        result.max_error = std::max(result.max_error, worst);
        if (worst > 1e-3)
          result.failures.push_back(StrCat("float32 ", what, " '", name, "' element ", at, " is ", g.values[at],
                                           " but the float64 kernels give ", w.values[at], " (error ", worst,
                                           " exceeds 1e-3)"));
      }
    };
    compare(r64.forward, r32.forward, "output");
    compare(r64.grads, r32.grads, "gradient");
  } catch (const std::exception& e) {
    result.failures.push_back(StrCat("the float32 check could not run: ", OneLine(e.what())));
  }
  result.ok = result.failures.empty();
  return result;
}

OpCheckReport CheckOp(const std::string& type, const OpCheckOptions& options) {
  OpCheckReport report;
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(type);
  const std::string label =
      StrCat("op '", type, "' (", info.origin.plugin.empty() ? "in-process" : info.origin.plugin, ")");
  NABLA_ENFORCE(!options.threads.empty(), kInvalidArgument, "opcheck: expected at least one thread count");
  if (info.traits.has_sub_block || info.traits.control_flow || info.traits.array_io) {
    report.notes.push_back(StrCat(type, ": runs blocks or tensor arrays: checked through whole programs"));
    return report;
  }
  ProbeGradMaker(*registry, info, label, &report.problems);
  // A grad maker's mistake is said once per op, by the probe or the first case.
  bool maker_reported = !report.problems.empty();
  if (info.grad_checks.empty()) {
    report.notes.push_back(StrCat(type, ": no GradCheck case, so no inputs to run its kernels on"));
    return report;
  }
  CheckedScope checked;
  for (Device* device : DevicesFor(*registry, type, options, &report)) {
    std::vector<DType> dtypes = FloatDTypes(*registry, type, device->Type());
    if (dtypes.empty()) {
      report.notes.push_back(StrCat(type, ": no floating kernel on ", DeviceLabel(*device)));
      continue;
    }
    for (const GradCheckSpec& spec : info.grad_checks) {
      std::set<std::string> size1_runs;    // cases whose size-1 variant ran
      std::set<std::string> failed_cases;  // cases whose first run failed
      for (DType dtype : dtypes) {
        if (NamesADType(spec) && dtype != DType::kFloat64) continue;
        const std::string where =
            StrCat(label, " on ", DeviceLabel(*device), "/", DTypeName(dtype), ", case '", spec.name, "'");
        // A kernel this build cannot run (a bfloat16 GEMM without oneDNN,
        // as in sanitizer builds) is a note, and the case's other dtypes
        // and gradients are still checked.
        bool unavailable = false;
        auto run = [&](const GradCheckSpec& s, int threads, CaseResult* out) -> bool {
          ++report.runs;
          try {
            *out = CaseRunner(type, s, *device, dtype, options.seed).Run(threads);
            for (const std::string& p : out->problems) report.problems.push_back(StrCat(where, ": ", p));
            if (!maker_reported)
              for (const std::string& p : out->maker_problems) report.problems.push_back(StrCat(where, ": ", p));
            maker_reported = maker_reported || !out->maker_problems.empty();
            return out->problems.empty() && out->maker_problems.empty();
          } catch (const Error& e) {
            if (e.kind() == ErrorKind::kUnimplemented) {
              unavailable = true;
              report.notes.push_back(StrCat(where, ": not checked: ", OneLine(e.what())));
            } else {
              report.problems.push_back(StrCat(where, ": ", OneLine(e.what())));
            }
            return false;
          } catch (const std::exception& e) {
            report.problems.push_back(StrCat(where, ": ", OneLine(e.what())));
            return false;
          }
        };
        CaseResult first;
        if (!run(spec, options.threads[0], &first)) {
          if (!unavailable) failed_cases.insert(spec.name);
          continue;
        }
        // Same bits on a second run: a kernel reading memory it never wrote
        // (fresh buffers hold 0xFF in checked mode) or keeping state.
        std::vector<std::pair<int, std::string>> reruns = {{options.threads[0], "a second run"}};
        for (size_t i = 1; i < options.threads.size(); ++i)
          reruns.emplace_back(options.threads[i], StrCat(options.threads[i], " threads"));
        for (const auto& [threads, what] : reruns) {
          CaseResult again;
          if (!run(spec, threads, &again)) break;
          std::string diff = Difference(first.forward, again.forward);
          if (diff.empty()) diff = Difference(first.grads, again.grads);
          if (!diff.empty()) {
            report.problems.push_back(StrCat(where, ": not the same bits with ", what, " as with ", options.threads[0],
                                             options.threads[0] == 1 ? " thread" : " threads", ": ", diff));
            break;
          }
        }
        // Empty tensors and size-1 dims: run as any case, or declined
        // with a clean error.
        for (int64_t d : {int64_t{0}, int64_t{1}}) {
          GradCheckSpec edge;
          if (!WithLeadingDim(spec, info.schema, d, &edge)) continue;
          ++report.runs;
          try {
            CaseResult r = CaseRunner(type, edge, *device, dtype, options.seed).Run(options.threads[0]);
            for (const std::string& p : r.problems)
              report.problems.push_back(StrCat(where, " with leading dim ", d, ": ", p));
            if (!maker_reported)
              for (const std::string& p : r.maker_problems)
                report.problems.push_back(StrCat(where, " with leading dim ", d, ": ", p));
            maker_reported = maker_reported || !r.maker_problems.empty();
            if (d == 1 && r.problems.empty() && r.maker_problems.empty()) size1_runs.insert(spec.name);
          } catch (const Error& e) {
            if (!Declines(e))
              report.problems.push_back(StrCat(where, " with leading dim ", d, ": ", OneLine(e.what())));
          } catch (const std::exception& e) {
            report.problems.push_back(StrCat(where, " with leading dim ", d, ": ", OneLine(e.what())));
          }
        }
      }
      // A case that failed already would only fail again.
      if (!info.HasGradient() || IsDryRun(*device) || failed_cases.count(spec.name)) continue;
      // The gradient itself: float64 central differences, and float32
      // kernels against float64 ones.
      const std::string where = StrCat(label, " on ", DeviceLabel(*device), ", case '", spec.name, "'");
      const std::vector<std::string> missing = GradOpsMissingOn(*registry, GradOpTypes(info, spec), *device, dtypes);
      if (!missing.empty()) {
        std::string names;
        for (const std::string& m : missing) names += StrCat(names.empty() ? "" : ", ", m);
        report.notes.push_back(StrCat(where, ": forward only: no kernel there for its grad op",
                                      missing.size() > 1 ? "s " : " ", names, ", and ", DeviceLabel(*device),
                                      " runs no cpu kernels on host copies, so training there stops at this op"));
        continue;
      }
      std::vector<GradCheckSpec> specs = {spec};
      GradCheckSpec ones;
      // Only where the op accepted the size-1 inputs (an index into rows
      // that are gone is declined, not a gradient to check).
      if (size1_runs.count(spec.name) && WithLeadingDim(spec, info.schema, 1, &ones)) specs.push_back(ones);
      if (std::find(dtypes.begin(), dtypes.end(), DType::kFloat64) != dtypes.end()) {
        for (const GradCheckSpec& s : specs) {
          ++report.runs;
          GradCheckResult r = CheckGradient(type, s, *device, options.seed);
          for (const std::string& f : r.failures)
            report.problems.push_back(
                StrCat(where, s.name == spec.name ? "" : " with leading dim 1", ": float64 gradcheck: ", OneLine(f)));
        }
      }
      if (std::find(dtypes.begin(), dtypes.end(), DType::kFloat32) != dtypes.end()) {
        ++report.runs;
        GradCheckResult r = CheckFloat32Gradient(type, spec, *device, options.seed);
        for (const std::string& f : r.failures) report.problems.push_back(StrCat(where, ": ", OneLine(f)));
      }
    }
  }
  return report;
}

}  // namespace nabla
