// The op plugin frozen at version 3 of the C ABI (tests/plugins/abi_v3/,
// built against the headers copied there and never edited) loads into this
// core and computes as it did: the CPU backend's GEMM and vector math, an
// input's values read as a shape, a view, a kernel dtype of its own, a
// gradient check, and a fusion pattern applied by the fusion pass. What
// every later core owes plugins built for version 3.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/fusion.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"

namespace nabla {
namespace {

std::vector<double> Values(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<double>(i) * 0.7 + 0.3) * scale;
  return v;
}

void Load() {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();  // scale and tanh, for the fusion pattern
  PluginManager::Instance().Load(ABI_V3_PLUGIN);
}

TEST(CApiV3, FrozenPluginLoadsWithItsAbiTag) {
  Load();
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v3_ops") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v3");
    }
  EXPECT_TRUE(found);
}

TEST(CApiV3, FrozenOpsComputeWithTheCpuBackend) {
  Load();
  const std::vector<double> x = Values(6 * 5, 1.0), w = Values(5 * 3, 0.5);
  OpDesc linear("abi_v3_linear", {{"X", {"x"}}, {"W", {"w"}}}, {{"Out", {"y"}}}, {});
  const op_case::Result r =
      op_case::RunOps({linear}, {{"x", DType::kFloat32, {6, 5}, x}, {"w", DType::kFloat32, {5, 3}, w}}, HostDevice());
  const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end());
  std::vector<float> want(6 * 3);
  cpu::Gemm(false, false, 6, 3, 5, 1.0f, xf.data(), 5, wf.data(), 3, 0.0f, want.data(), 3);
  EXPECT_EQ(r.values.at("y"), std::vector<double>(want.begin(), want.end()));
  const std::vector<GradCheckResult> checks = CheckOpGradients("abi_v3_linear", HostDevice());
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_TRUE(checks[0].ok) << (checks[0].failures.empty() ? "" : checks[0].failures[0]);

  const std::vector<double> g = Values(300, 3.0), dy = Values(300, 1.0);
  const std::vector<float> gf(g.begin(), g.end()), dyf(dy.begin(), dy.end());
  std::vector<float> gelu(300), dgelu(300);
  cpu::Gelu(gf.data(), gelu.data(), 300, false);
  cpu::GeluGrad(gf.data(), dyf.data(), dgelu.data(), 300, false);
  for (const bool grad : {false, true}) {
    OpDesc op("abi_v3_gelu", {{"X", {"x"}}, {"Out@GRAD", {"dy"}}}, {{"Out", {"y"}}}, {{"grad", grad}});
    const op_case::Result got =
        op_case::RunOps({op}, {{"x", DType::kFloat32, {300}, g}, {"dy", DType::kFloat32, {300}, dy}}, HostDevice());
    const std::vector<float>& expect = grad ? dgelu : gelu;
    EXPECT_EQ(got.values.at("y"), std::vector<double>(expect.begin(), expect.end())) << "grad " << grad;
  }
}

TEST(CApiV3, FrozenOpsReadValuesAndMakeViews) {
  Load();
  OpDesc fill("abi_v3_fill", {{"ShapeTensor", {"s"}}}, {{"Out", {"y"}}},
              {{"shape", std::vector<int>{}}, {"value", 0.5f}});
  op_case::Result r = op_case::RunOps({fill}, {{"s", DType::kInt64, {3}, {2, 1, 3}}}, HostDevice());
  EXPECT_EQ(r.shapes.at("y"), (Shape{2, 1, 3}));
  EXPECT_EQ(r.values.at("y"), std::vector<double>(6, 0.5));

  const std::vector<double> x = Values(24, 1.0);
  OpDesc flatten("abi_v3_flatten", {{"X", {"x"}}}, {{"Out", {"y"}}}, {});
  r = op_case::RunOps({flatten}, {{"x", DType::kFloat32, {2, 3, 4}, x}}, HostDevice());
  EXPECT_EQ(r.shapes.at("y"), (Shape{2, 12}));
  const std::vector<float> xf(x.begin(), x.end());
  EXPECT_EQ(r.values.at("y"), std::vector<double>(xf.begin(), xf.end()));
}

TEST(CApiV3, FrozenFusionPatternReplacesScaleAndTanh) {
  Load();
  const std::string yaml = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [4, 5], dtype: float32}
    ops:
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [s]}, attrs: {scale: 1.5, bias: 0.25, bias_after_scale: true}}
      - {type: tanh, inputs: {X: [s]}, outputs: {Out: [y]}}
)";
  ProgramDesc fused = ParseProgram(yaml, "v3.yaml");
  EXPECT_EQ(FuseOps(fused, {"y"}), 1u);
  ASSERT_EQ(fused.Root()->AllOps().size(), 1u);
  EXPECT_EQ(fused.Root()->AllOps()[0]->Type(), "abi_v3_scale_tanh");
  const ProgramDesc plain = ParseProgram(yaml, "v3.yaml");
  std::vector<OpDesc> chain;
  for (const auto& op : plain.Root()->AllOps()) chain.push_back(*op);
  const std::vector<double> x = Values(20, 2.0);
  const op_case::Result want = op_case::RunOps(chain, {{"x", DType::kFloat32, {4, 5}, x}}, HostDevice());
  const op_case::Result got =
      op_case::RunOps({*fused.Root()->AllOps()[0]}, {{"x", DType::kFloat32, {4, 5}, x}}, HostDevice());
  ASSERT_EQ(got.values.at("y").size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(got.values.at("y")[i], want.values.at("y")[i], 1e-6) << i;
}

}  // namespace
}  // namespace nabla
