// The op plugin frozen at version 6 of the C ABI (tests/plugins/abi_v6/,
// built against the headers copied there and never edited) loads into this
// core and behaves as it did: its control-flow op runs its block in child
// scopes it keeps and drops, under the run's iteration cap, with the block's
// vars local to each step; its grad maker sees the grad block the backward
// builder made and passes it on as a block attribute; its errors name the
// op's place in the YAML file. What every later core owes plugins built for
// version 6.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

// x = x * 2, `times` times, through a var local to each step; loss = mean(x).
constexpr const char* kRepeat = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float64}
      scopes: {type: step_scopes}
    ops:
      - type: abi_v6_repeat
        inputs: {X: [x]}
        outputs: {Out: [x], StepScopes: [scopes], Locals: [locals]}
        attrs: {sub_block: 1, times: TIMES, scale: 2.0}
      - {type: mean, inputs: {X: [x]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    vars:
      tmp: {shape: [2, 3], dtype: float64}
    ops:
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [tmp]}, attrs: {scale: 2.0}}
      - {type: assign, inputs: {X: [tmp]}, outputs: {Out: [x]}}
)";

ProgramDesc Repeat(int times) {
  std::string text = kRepeat;
  text.replace(text.find("TIMES"), 5, std::to_string(times));
  return ParseProgram(text, "repeat.yaml");
}

const op_case::Doubles kX = {0.5, -1, 1.5, -2, 2.5, -3};

void Load() {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(ABI_V6_PLUGIN);
}

TEST(CApiV6, FrozenPluginLoadsWithItsAbiTag) {
  Load();
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v6_ops") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v6");
    }
  EXPECT_TRUE(found);
  EXPECT_TRUE(CurrentRegistry()->Get("abi_v6_repeat").traits.control_flow);
  EXPECT_TRUE(CurrentRegistry()->Get("abi_v6_repeat").traits.has_sub_block);
}

TEST(CApiV6, FrozenLoopRunsItsBlockInKeptChildScopes) {
  Load();
  const ProgramDesc program = Repeat(3);
  for (const char* name : {"sequential", "taskgraph"}) {
    auto executor = CreateExecutor(name, HostDevice());
    Scope scope;
    op_case::Write(scope, {"x", DType::kFloat64, {2, 3}, kX}, HostDevice());
    for (int run = 0; run < 2; ++run) {
      executor->Run(program, 0, scope);
      // The steps' scopes are kept, and the next run drops the last run's.
      EXPECT_EQ(scope.FindVar("scopes")->GetStepScopes().size(), 3u) << name;
    }
    op_case::Doubles want;
    for (double v : kX) want.push_back(v * 64);  // two runs of 2^3
    EXPECT_EQ(op_case::Read(scope.FindVar("x")->GetTensor()), want) << name;
    // tmp stayed in each step; the block declares one var.
    EXPECT_EQ(op_case::Read(scope.FindVar("locals")->GetTensor()), (op_case::Doubles{3, 1})) << name;
    EXPECT_EQ(scope.FindVar("tmp"), nullptr) << name;
  }
}

TEST(CApiV6, FrozenLoopHonoursTheIterationCapAndNamesItsPlace) {
  Load();
  ExecutorOptions capped;
  capped.max_loop_iterations = 2;
  Scope scope;
  op_case::Write(scope, {"x", DType::kFloat64, {2, 3}, kX}, HostDevice());
  try {
    CreateExecutor("sequential", HostDevice(), capped)->Run(Repeat(3), 0, scope);
    ADD_FAILURE() << "the cap did not stop the loop";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange) << e.what();
    EXPECT_NE(std::string(e.what()).find("times 3 is over max_loop_iterations = 2"), std::string::npos) << e.what();
  }
  try {
    CreateExecutor("sequential", HostDevice())->Run(Repeat(-1), 0, scope);
    ADD_FAILURE() << "times -1 ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repeat.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("times must be >= 0, but received -1"), std::string::npos) << e.what();
  }
}

TEST(CApiV6, FrozenGradMakerPassesTheGradBlockOn) {
  Load();
  ProgramDesc program = Repeat(3);
  AppendBackward(program, "loss", {}, {});
  const OpDesc* grad = nullptr;
  for (const auto& op : program.Root()->AllOps())
    if (op->Type() == "abi_v6_repeat_grad") grad = op.get();
  ASSERT_NE(grad, nullptr) << ProgramToYaml(program);
  const int block = grad->Attr<BlockRef>("sub_block").idx;
  ASSERT_GT(block, 1);
  ASSERT_LT(static_cast<size_t>(block), program.Size());
  EXPECT_EQ(program.Block(static_cast<size_t>(block))->ParentIdx(), 1);
  EXPECT_EQ(grad->Attr<int>("grad_ops"), static_cast<int>(program.Block(static_cast<size_t>(block))->OpSize()));
  EXPECT_GT(grad->Attr<int>("grad_ops"), 0);
  for (const char* name : {"sequential", "taskgraph"}) {
    Scope scope;
    op_case::Write(scope, {"x", DType::kFloat64, {2, 3}, kX}, HostDevice());
    CreateExecutor(name, HostDevice())->Run(program, 0, scope);
    // d mean(x * 2^3) / dx = 8 / 6; the grad op freed the kept scopes.
    EXPECT_EQ(op_case::Read(scope.FindVar("x@GRAD")->GetTensor()), op_case::Doubles(6, 8.0 / 6.0)) << name;
    EXPECT_EQ(scope.FindVar("scopes")->GetStepScopes().size(), 0u) << name;
  }
}

}  // namespace
}  // namespace nabla
