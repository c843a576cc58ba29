// The op plugin frozen at version 7 of the C ABI (tests/plugins/abi_v7/,
// built against the headers copied there and never edited) loads into this
// core and behaves as it did: its kernel reads every attribute type through
// kernel_attr, per op and per call, and its copy of the op (kept by
// op_version) follows every change of the op, over more ops than the copies
// the SDK keeps, in programs and in eager calls; a missing or ill-typed
// attribute is an error naming it. What every later core owes plugins built
// for version 7.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/eager.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

void Load() {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(ABI_V7_PLUGIN);
}

// Op k of the chain: its attributes differ from its neighbours'.
struct Affine {
  float scale;
  int shift;
  bool negate;
  std::vector<float> offsets;
};
Affine AffineOf(int k) { return {k % 4 == 0 ? 0.5f : 1.0f, k % 3 - 1, k % 2 == 1, {0.25f * (k % 5), -0.5f}}; }

std::string FloatList(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// x0 -> op 0 -> x1 -> ... -> x<n>, float64 [2, 3]: more ops than the SDK keeps
// copies of (64), so copies are replaced while the chain runs.
ProgramDesc Chain(int n, const std::string& probe = "") {
  std::string text = "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n";
  text += "      x0: {shape: [2, 3], dtype: float64}\n    ops:\n";
  for (int k = 0; k < n; ++k) {
    const Affine a = AffineOf(k);
    text += "      - type: abi_v7_affine\n        inputs: {X: [x" + std::to_string(k) + "]}\n";
    text += "        outputs: {Out: [x" + std::to_string(k + 1) + "]}\n";
    text += "        attrs: {scale: " + std::to_string(a.scale) + ", shift: " + std::to_string(a.shift) +
            ", negate: " + (a.negate ? "true" : "false") + ", offsets: " + FloatList(a.offsets) +
            ", dims: [2, 3], probe: \"" + (k == n - 1 ? probe : "") + "\"}\n";
  }
  return ParseProgram(text, "chain.yaml");
}

op_case::Doubles Apply(const Affine& a, op_case::Doubles x) {
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = (a.negate ? -1.0 : 1.0) * (x[i] * a.scale + a.shift + a.offsets[i % a.offsets.size()]);
  return x;
}

const op_case::Doubles kX = {0.5, -1, 1.5, -2, 2.5, -3};

TEST(CApiV7, FrozenPluginLoadsWithItsAbiTag) {
  Load();
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v7_ops") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v7");
    }
  EXPECT_TRUE(found);
}

TEST(CApiV7, FrozenKernelReadsEachOpsAttributesOnEveryRun) {
  Load();
  constexpr int kOps = 100;
  ProgramDesc program = Chain(kOps);
  for (const char* name : {"sequential", "taskgraph"}) {
    auto executor = CreateExecutor(name, HostDevice());
    Scope scope;
    op_case::Write(scope, {"x0", DType::kFloat64, {2, 3}, kX}, HostDevice());
    op_case::Doubles want = kX;
    for (int k = 0; k < kOps; ++k) want = Apply(AffineOf(k), want);
    for (int run = 0; run < 2; ++run) {
      executor->Run(program, 0, scope);
      EXPECT_EQ(op_case::Read(scope.FindVar("x" + std::to_string(kOps))->GetTensor()), want) << name;
    }
    // A changed op is read anew, by kernel_attr and in the kernel's copy of
    // the op (which would otherwise disagree: an error).
    OpDesc& first = *program.Root()->AllOps()[0];
    first.SetAttr("scale", 3.0f);
    first.SetAttr("negate", !std::get<bool>(first.GetAttr("negate")));
    Affine changed = AffineOf(0);
    changed.scale = 3.0f;
    changed.negate = !changed.negate;
    want = Apply(changed, kX);
    for (int k = 1; k < kOps; ++k) want = Apply(AffineOf(k), want);
    executor->Run(program, 0, scope);
    EXPECT_EQ(op_case::Read(scope.FindVar("x" + std::to_string(kOps))->GetTensor()), want) << name;
    program = Chain(kOps);
  }
}

TEST(CApiV7, FrozenKernelFollowsEagerCallsWithOtherAttributes) {
  Load();
  using eager::Tensor;
  const Tensor x = Tensor::FromVector<double>({0.5, -1, 1.5, -2, 2.5, -3}, {2, 3});
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < 80; ++k) {
      const Affine a = AffineOf(k);
      const eager::Outputs out = eager::Call("abi_v7_affine", {{"X", {x}}},
                                             {{"scale", a.scale},
                                              {"shift", a.shift},
                                              {"negate", a.negate},
                                              {"offsets", a.offsets},
                                              {"dims", std::vector<int>{2, 3}}});
      EXPECT_EQ(out["Out"].ToVector<double>(), Apply(a, kX)) << "call " << k;
    }
  }
}

TEST(CApiV7, FrozenKernelNamesAMissingOrIllTypedAttribute) {
  Load();
  for (const auto& [probe, want] : std::vector<std::pair<std::string, std::string>>{
           {"missing", "has no attribute 'no_such_attr'"},
           {"wrong_type", "attribute 'scale' of op 'abi_v7_affine' is not of the type asked for"}}) {
    Scope scope;
    op_case::Write(scope, {"x0", DType::kFloat64, {2, 3}, kX}, HostDevice());
    try {
      CreateExecutor("sequential", HostDevice())->Run(Chain(3, probe), 0, scope);
      ADD_FAILURE() << probe << " ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("abi_v7_affine"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nabla
