// The op plugin frozen at version 8 of the C ABI (tests/plugins/abi_v8/,
// built against the headers copied there and never edited) loads into this
// core and behaves as it did: the input slots it marks with
// op_bf16_takes_float32 and the op it declares with the MOVES_DATA trait
// read back as their traits, and under bfloat16 mixed
// precision its bias + relu between two GEMMs runs in bfloat16 without the
// casts around it, its bias and the gradient the GEMM after it hands back
// staying float32, with the loss and every gradient bit for bit those of
// the program that keeps the casts. What every later core owes plugins
// built for version 8.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/mixed_precision.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

void Load() {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(ABI_V8_PLUGIN);
}

TEST(CApiV8, FrozenPluginLoadsWithItsAbiTagAndTraits) {
  Load();
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v8_ops") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v8");
    }
  EXPECT_TRUE(found);
  const OpRegistry& r = *CurrentRegistry();
  EXPECT_EQ(r.Get("abi_v8_bias_relu").traits.bf16_float32_inputs, std::vector<std::string>{"Y"});
  EXPECT_EQ(r.Get("abi_v8_bias_relu_grad").traits.bf16_float32_inputs, (std::vector<std::string>{"Y", "Out@GRAD"}));
  EXPECT_TRUE(r.Get("abi_v8_copy").traits.moves_data);
  EXPECT_FALSE(r.Get("abi_v8_bias_relu").traits.moves_data);
}

// mul, the plugin's bias + relu, mul; with or without ElideBf16Casts.
std::map<std::string, std::vector<float>> RunBetweenGemms(bool elide, std::vector<std::string>* ops) {
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [6, 16], dtype: float32, persistable: true}
      w1: {shape: [16, 12], dtype: float32, persistable: true}
      b: {shape: [12], dtype: float32, persistable: true}
      w2: {shape: [12, 5], dtype: float32, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [h]}}
      - {type: abi_v8_bias_relu, inputs: {X: [h], Y: [b]}, outputs: {Out: [t]}}
      - {type: mul, inputs: {X: [t], Y: [w2]}, outputs: {Out: [o]}}
      - {type: square, inputs: {X: [o]}, outputs: {Out: [sq]}}
      - {type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}
)",
                               "v8.yaml");
  ApplyBf16MixedPrecision(p);
  if (elide) {
    EXPECT_EQ(ElideBf16Casts(p, {"loss"}), 1u);
  }
  AppendBackward(p, "loss", {}, {});
  FoldBf16Casts(p);
  for (const auto& op : p.Root()->AllOps()) {
    std::string s = op->Type() + "(";
    for (const auto& n : op->InputArgumentNames()) s += n + " ";
    ops->push_back(s + ")");
  }
  Scope scope;
  std::mt19937 gen(8);
  std::normal_distribution<float> d;
  for (const char* name : {"x", "w1", "b", "w2"}) {
    const Shape shape = p.Root()->FindVar(name)->GetShape();
    float* v = scope.Var(name)->GetTensor().Allocate<float>(HostDevice(), shape);
    for (int64_t i = 0; i < NumElements(shape); ++i) v[i] = d(gen) * 0.6f;
  }
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  std::map<std::string, std::vector<float>> out;
  for (const char* var : {"loss", "x@GRAD", "w1@GRAD", "b@GRAD", "w2@GRAD"}) {
    const Tensor& t = scope.FindVar(var)->GetTensor();
    EXPECT_EQ(t.GetDType(), DType::kFloat32) << var;
    out[var].assign(t.Data<float>(), t.Data<float>() + t.Numel());
  }
  return out;
}

TEST(CApiV8, FrozenBiasOpRunsInBf16BetweenGemmsWithTheSameBits) {
  Load();
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  std::vector<std::string> kept_ops, elided_ops;
  const auto kept = RunBetweenGemms(false, &kept_ops);
  const auto elided = RunBetweenGemms(true, &elided_ops);
  EXPECT_EQ(kept_ops.size(), elided_ops.size() + 3) << ::testing::PrintToString(elided_ops);
  bool reads_bf16 = false;
  for (const auto& s : elided_ops) reads_bf16 = reads_bf16 || s.rfind("abi_v8_bias_relu(h@BF16 b ", 0) == 0;
  EXPECT_TRUE(reads_bf16) << ::testing::PrintToString(elided_ops);
  for (const auto& [var, want] : kept) EXPECT_EQ(elided.at(var), want) << var;
}

}  // namespace
}  // namespace nabla
