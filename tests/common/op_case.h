#pragma once
// One op's GradCheck case (the specs registered next to the op) as a float32
// program of the forward op and its grad ops, run on a device and compared
// with another run: the OpenCL suite checks its kernels against the CPU's,
// the vision suite oneDNN's against the reference kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/backward.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/program.h"
#include "nabla/scope.h"

namespace nabla::op_case {

using Doubles = std::vector<double>;

// A named input: dtype, shape, values.
struct Input {
  std::string name;
  DType dtype;
  Shape shape;
  Doubles values;
};

inline void Write(Scope& scope, const Input& in, Device& device) {
  Tensor host;
  void* p = host.Allocate(HostDevice(), in.dtype, in.shape);
  for (size_t i = 0; i < in.values.size(); ++i) {
    switch (in.dtype) {
      case DType::kFloat32:
        static_cast<float*>(p)[i] = static_cast<float>(in.values[i]);
        break;
      case DType::kFloat64:
        static_cast<double*>(p)[i] = in.values[i];
        break;
      case DType::kInt32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(in.values[i]);
        break;
      case DType::kInt64:
        static_cast<int64_t*>(p)[i] = static_cast<int64_t>(in.values[i]);
        break;
      case DType::kBool:
        static_cast<bool*>(p)[i] = in.values[i] != 0.0;
        break;
      case DType::kBFloat16:
        static_cast<bfloat16*>(p)[i] = FloatToBf16(static_cast<float>(in.values[i]));
        break;
    }
  }
  scope.Var(in.name)->GetTensor().CopyFrom(host, device);
}

inline Doubles Read(const Tensor& t) {
  Tensor host;
  host.CopyFrom(t, HostDevice());
  Doubles out(static_cast<size_t>(host.Numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (host.GetDType()) {
      case DType::kFloat32:
        out[i] = host.Data<float>()[i];
        break;
      case DType::kFloat64:
        out[i] = host.Data<double>()[i];
        break;
      case DType::kInt32:
        out[i] = host.Data<int32_t>()[i];
        break;
      case DType::kInt64:
        out[i] = static_cast<double>(host.Data<int64_t>()[i]);
        break;
      case DType::kBool:
        out[i] = host.Data<bool>()[i];
        break;
      case DType::kBFloat16:
        out[i] = Bf16ToFloat(host.Data<bfloat16>()[i]);
        break;
    }
  }
  return out;
}

struct Result {
  std::map<std::string, Shape> shapes;
  std::map<std::string, Doubles> values;
  std::map<std::string, const Device*> devices;
};

// Runs `ops` in order on `device` with `inputs` fed, and reads back every
// output var. What an op with a kernel for `device` writes must be there.
inline Result RunOps(const std::vector<OpDesc>& ops, const std::vector<Input>& inputs, Device& device) {
  ProgramDesc program;
  for (const OpDesc& op : ops) program.Root()->AppendOp(op);
  Scope scope;
  for (const Input& in : inputs) Write(scope, in, device);
  ExecutorOptions options;
  options.seed = 5;
  auto executor = CreateExecutor("sequential", device, options);
  executor->Run(program, 0, scope);
  Result r;
  for (const OpDesc& op : ops)
    for (const std::string& name : op.OutputArgumentNames()) {
      if (name == kEmptyVarName) continue;
      const Tensor& t = scope.FindVar(name)->GetTensor();
      if (!t.IsInitialized()) continue;
      if (CurrentRegistry()->FindKernel(op.Type(), device.Type(), DType::kFloat32)) {
        EXPECT_EQ(t.GetDevice(), &device) << name << " written by '" << op.Type() << "' is not on " << device.Name();
      }
      r.devices[name] = t.GetDevice();
      r.shapes[name] = t.GetShape();
      r.values[name] = Read(t);
    }
  return r;
}

// Both runs must produce the same vars with the same shapes, and values
// within float32 round-off of each other.
inline void ExpectSame(const Result& cpu, const Result& cl, const std::string& what) {
  ASSERT_EQ(cpu.values.size(), cl.values.size()) << what;
  for (const auto& [name, want] : cpu.values) {
    auto it = cl.values.find(name);
    ASSERT_NE(it, cl.values.end()) << what << ": the second run left no " << name;
    EXPECT_EQ(cpu.shapes.at(name), cl.shapes.at(name)) << what << ": " << name;
    const Doubles& got = it->second;
    ASSERT_EQ(want.size(), got.size()) << what << ": " << name;
    for (size_t i = 0; i < want.size(); ++i) {
      const double tol = 2e-5 + 2e-4 * std::abs(want[i]);
      ASSERT_NEAR(got[i], want[i], tol) << what << ": " << name << "[" << i << "]";
    }
  }
}

inline std::vector<Input> InputsOf(const GradCheckSpec& spec, VarNameMap* slots,
                                   std::unordered_set<std::string>* no_grad, std::mt19937_64& rng) {
  std::vector<Input> inputs;
  for (const GradCheckInput& gi : spec.inputs) {
    for (int j = 0; j < gi.count; ++j) {
      Input in;
      in.name = gi.slot + "_" + std::to_string(j);
      in.dtype = IsFloating(gi.dtype) ? DType::kFloat32 : gi.dtype;
      in.shape = gi.shape;
      in.values = gi.values;
      if (in.values.empty()) {
        std::uniform_real_distribution<double> u(gi.low, gi.high);
        for (int64_t i = 0; i < NumElements(gi.shape); ++i) {
          double x;
          bool near;
          do {
            x = u(rng);
            if (!IsFloating(in.dtype)) x = std::floor(x);
            near = false;
            for (double k : gi.kinks) near = near || std::abs(x - k) < gi.kink_margin;
          } while (near);
          in.values.push_back(x);
        }
      }
      (*slots)[gi.slot].push_back(in.name);
      if (!gi.check || !IsFloating(in.dtype)) no_grad->insert(in.name);
      inputs.push_back(std::move(in));
    }
  }
  return inputs;
}

// One check case as a float32 program: the forward op, random upstream
// gradients for its graded outputs (zeros for the others), and the grad ops
// its GradOpDescMaker emits. Shapes come from a CPU run of the forward op.
struct Case {
  std::vector<OpDesc> ops;
  std::vector<Input> inputs;
};

inline Case BuildCase(const std::string& type, const GradCheckSpec& spec) {
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(type);
  std::mt19937_64 rng(7);
  VarNameMap ins, outs;
  std::unordered_set<std::string> no_grad;
  Case c;
  c.inputs = InputsOf(spec, &ins, &no_grad, rng);
  auto out_slots = spec.outputs;
  if (out_slots.empty())
    for (const SlotDef& s : info.schema.outputs)
      if (!s.dispensable) out_slots.emplace_back(s.name, 1);
  for (const auto& [slot, count] : out_slots)
    for (int j = 0; j < count; ++j) outs[slot].push_back(slot + "_out" + std::to_string(j));
  OpDesc fwd(type, ins, outs, spec.attrs);
  FillDefaultAttrs(fwd, *registry);
  c.ops = {fwd};
  Result shapes = RunOps(c.ops, c.inputs, HostDevice());
  if (info.HasGradient()) {
    std::vector<Input> grads;
    for (const auto& [slot, names] : outs) {
      bool graded =
          std::find(spec.no_grad_outputs.begin(), spec.no_grad_outputs.end(), slot) == spec.no_grad_outputs.end();
      for (const std::string& name : names) {
        Input g{GradVarName(name), DType::kFloat32, shapes.shapes.at(name), {}};
        std::uniform_real_distribution<double> u(-1.0, 1.0);
        for (int64_t i = 0; i < NumElements(g.shape); ++i) g.values.push_back(graded ? u(rng) : 0.0);
        grads.push_back(std::move(g));
      }
    }
    for (auto& op : MakeGradOps(fwd, no_grad)) {
      FillDefaultAttrs(*op, *registry);
      c.ops.push_back(*op);
    }
    c.inputs.insert(c.inputs.end(), grads.begin(), grads.end());
  }
  return c;
}

}  // namespace nabla::op_case
