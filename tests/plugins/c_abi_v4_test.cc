// The op plugin frozen at version 4 of the C ABI (tests/plugins/abi_v4/,
// built against the headers copied there and never edited) loads into this
// core and computes as it did: a tensor copy, a no-buffer input read for its
// shape and dtype, and a program pass that folds a constant (evaluated on
// the host) into a scale op, removing the ops and vars it no longer needs.
// What every later core owes plugins built for version 4.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/fusion.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

std::vector<double> Values(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<double>(i) * 0.7 + 0.3) * scale;
  return v;
}

void Load() {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();  // scale and fill_constant, for the pass
  PluginManager::Instance().Load(ABI_V4_PLUGIN);
}

// Runs `op` once on the host over the vars of `scope`.
void RunOp(const OpDesc& op, Scope& scope) {
  ProgramDesc program;
  program.Root()->AppendOp(op);
  CreateExecutor("sequential", HostDevice(), ExecutorOptions{})->Run(program, 0, scope);
}

TEST(CApiV4, FrozenPluginLoadsWithItsAbiTag) {
  Load();
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v4_ops") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v4");
    }
  EXPECT_TRUE(found);
}

TEST(CApiV4, FrozenOpCopiesIntoStorageOfItsOwn) {
  Load();
  Scope scope;
  const std::vector<double> x = Values(12, 2.0);
  op_case::Write(scope, {"x", DType::kFloat32, {3, 4}, x}, HostDevice());
  RunOp(OpDesc("abi_v4_copy", {{"X", {"x"}}}, {{"Out", {"y"}}}, {}), scope);
  const Tensor& in = scope.FindVar("x")->GetTensor();
  const Tensor& out = scope.FindVar("y")->GetTensor();
  EXPECT_EQ(out.GetShape(), (Shape{3, 4}));
  EXPECT_EQ(out.GetDType(), DType::kFloat32);
  EXPECT_NE(out.Data<float>(), in.Data<float>());
  const std::vector<float> xf(x.begin(), x.end());
  EXPECT_EQ(op_case::Read(out), std::vector<double>(xf.begin(), xf.end()));
}

TEST(CApiV4, FrozenOpReadsANoBufferInputWithoutData) {
  Load();
  const OpInfo& info = CurrentRegistry()->Get("abi_v4_zeros_like");
  ASSERT_EQ(info.schema.inputs.size(), 1u);
  EXPECT_TRUE(info.schema.inputs[0].no_buffer);
  // X has a shape and a dtype but no buffer (as after an executor released it).
  Scope scope;
  Tensor& x = scope.Var("x")->GetTensor();
  x.Resize({2, 5});
  x.SetDType(DType::kFloat64);
  ASSERT_FALSE(x.IsInitialized());
  RunOp(OpDesc("abi_v4_zeros_like", {{"X", {"x"}}}, {{"Out", {"y"}}}, {}), scope);
  const Tensor& y = scope.FindVar("y")->GetTensor();
  EXPECT_EQ(y.GetShape(), (Shape{2, 5}));
  EXPECT_EQ(y.GetDType(), DType::kFloat64);
  EXPECT_EQ(op_case::Read(y), std::vector<double>(10, 0.0));
}

const char* const kShiftProgram = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
    ops:
      - {type: fill_constant, outputs: {Out: [c]}, attrs: {shape: [1], value: 0.5}}
      - {type: scale, inputs: {X: [c]}, outputs: {Out: [s]}, attrs: {scale: 3.0}}
      - {type: abi_v4_shift, inputs: {X: [x], Shift: [s]}, outputs: {Out: [y]}}
)";

std::vector<OpDesc> OpsOf(const ProgramDesc& p) {
  std::vector<OpDesc> ops;
  for (const auto& op : p.Root()->AllOps()) ops.push_back(*op);
  return ops;
}

TEST(CApiV4, FrozenPassFoldsAConstantIntoScale) {
  Load();
  const std::vector<double> x = Values(6, 1.5);
  const ProgramDesc plain = ParseProgram(kShiftProgram, "v4.yaml");
  const op_case::Result want = op_case::RunOps(OpsOf(plain), {{"x", DType::kFloat32, {2, 3}, x}}, HostDevice());
  ASSERT_EQ(want.values.at("y").size(), 6u);
  for (size_t i = 0; i < 6; ++i)  // the frozen kernel: X + Shift, Shift = 3 * 0.5
    EXPECT_EQ(want.values.at("y")[i], static_cast<double>(static_cast<float>(x[i]) + 1.5f)) << i;

  ProgramDesc folded = ParseProgram(kShiftProgram, "v4.yaml");
  EXPECT_EQ(FuseOps(folded, {"y"}), 1u);
  const BlockDesc& block = *folded.Root();
  ASSERT_EQ(block.AllOps().size(), 1u);
  const OpDesc& scale = *block.Op(0);
  EXPECT_EQ(scale.Type(), "scale");
  EXPECT_EQ(scale.Input("X"), std::vector<std::string>{"x"});
  EXPECT_EQ(scale.Output("Out"), std::vector<std::string>{"y"});
  EXPECT_EQ(scale.Attr<float>("scale"), 1.0f);
  EXPECT_EQ(scale.Attr<float>("bias"), 1.5f);  // evaluated on the host
  EXPECT_TRUE(scale.Attr<bool>("bias_after_scale"));
  EXPECT_EQ(block.FindVar("c"), nullptr);
  EXPECT_EQ(block.FindVar("s"), nullptr);
  const VarDesc* y = block.FindVar("y");
  ASSERT_NE(y, nullptr);
  EXPECT_TRUE(y->HasDType());
  EXPECT_EQ(y->GetDType(), DType::kFloat32);
  EXPECT_EQ(y->GetShape(), (Shape{2, 3}));
  VerifyProgram(folded, *CurrentRegistry());
  const op_case::Result got = op_case::RunOps(OpsOf(folded), {{"x", DType::kFloat32, {2, 3}, x}}, HostDevice());
  EXPECT_EQ(got.values.at("y"), want.values.at("y"));

  // A kept Shift: folded, but the ops computing it stay.
  ProgramDesc kept = ParseProgram(kShiftProgram, "v4.yaml");
  EXPECT_EQ(FuseOps(kept, {"y", "s"}), 1u);
  ASSERT_EQ(kept.Root()->AllOps().size(), 3u);
  EXPECT_EQ(kept.Root()->Op(2)->Type(), "scale");
  EXPECT_NE(kept.Root()->FindVar("s"), nullptr);

  // A fed Shift is not a constant: the program stays as it was.
  const std::string fed_text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
      s: {shape: [1], dtype: float32}
    ops:
      - {type: abi_v4_shift, inputs: {X: [x], Shift: [s]}, outputs: {Out: [y]}}
)";
  ProgramDesc fed = ParseProgram(fed_text, "fed.yaml");
  const std::string before = ProgramToYaml(fed);
  EXPECT_EQ(FuseOps(fed, {"y"}), 0u);
  EXPECT_EQ(ProgramToYaml(fed), before);
}

}  // namespace
}  // namespace nabla
