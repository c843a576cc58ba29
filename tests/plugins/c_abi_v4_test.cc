// The op plugin frozen at version 4 of the C ABI (tests/plugins/abi_v4/,
// built against the headers copied there and never edited) loads into this
// core and computes as it did: a tensor copy, a no-buffer input read for its
// shape and dtype, the CPU backend's row kernels, SumArrays, bfloat16
// conversions and oneDNN state (the bits of nabla's own functions), and a
// program pass that folds a constant (evaluated on the host) into a scale
// op, removing the ops and vars it no longer needs.
// What every later core owes plugins built for version 4.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"
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

std::vector<double> AsDoubles(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
std::vector<float> AsFloats(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

TEST(CApiV4, FrozenOpsComputeWithTheCpuRowKernels) {
  Load();
  const int64_t rows = 5, n = 37;
  const std::vector<double> x = Values(rows * n, 4.0), dy = Values(rows * n, 1.0);
  const std::vector<float> xf = AsFloats(x), dyf = AsFloats(dy);

  // softmax and its gradient, against nabla's own row kernels.
  std::vector<float> y(rows * n), dx(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xf.data() + r * n;
    const float sum = cpu::ExpShiftedSum(xr, cpu::RowMax(xr, n), y.data() + r * n, n);
    cpu::ScaleRow(y.data() + r * n, 1.0f / sum, n);
    cpu::SoftmaxGradRow(y.data() + r * n, dyf.data() + r * n, dx.data() + r * n, n);
  }
  OpDesc softmax("abi_v4_softmax", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"grad", false}});
  op_case::Result r = op_case::RunOps({softmax}, {{"x", DType::kFloat32, {rows, n}, x}}, HostDevice());
  EXPECT_EQ(r.values.at("y"), AsDoubles(y));
  OpDesc softmax_grad("abi_v4_softmax", {{"X", {"y"}}, {"Out@GRAD", {"dy"}}}, {{"Out", {"dx"}}}, {{"grad", true}});
  r = op_case::RunOps({softmax_grad},
                      {{"y", DType::kFloat32, {rows, n}, AsDoubles(y)}, {"dy", DType::kFloat32, {rows, n}, dy}},
                      HostDevice());
  EXPECT_EQ(r.values.at("dx"), AsDoubles(dx));

  // layer_norm and its gradient.
  const std::vector<double> scale = Values(n, 0.8), bias = Values(n, 0.3);
  const std::vector<float> scalef = AsFloats(scale), biasf = AsFloats(bias);
  const float eps = 1e-5f;
  std::vector<float> ln(rows * n), mean(rows), var(rows), lndx(rows * n), dscale(n, 0.0f), dbias(n, 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    cpu::LayerNormRow(xf.data() + i * n, n, scalef.data(), biasf.data(), eps, ln.data() + i * n, &mean[i], &var[i]);
    cpu::LayerNormGradRow(xf.data() + i * n, dyf.data() + i * n, n, mean[i], 1.0f / std::sqrt(var[i] + eps),
                          scalef.data(), lndx.data() + i * n, dscale.data(), dbias.data());
  }
  OpDesc layer_norm("abi_v4_layer_norm", {{"X", {"x"}}, {"Scale", {"scale"}}, {"Bias", {"bias"}}},
                    {{"Y", {"y"}}, {"Mean", {"mean"}}, {"Variance", {"var"}}}, {{"epsilon", eps}});
  OpDesc layer_norm_grad(
      "abi_v4_layer_norm_grad",
      {{"X", {"x"}}, {"Scale", {"scale"}}, {"Mean", {"mean"}}, {"Variance", {"var"}}, {"Y@GRAD", {"dy"}}},
      {{"X@GRAD", {"dx"}}, {"Scale@GRAD", {"dscale"}}, {"Bias@GRAD", {"dbias"}}}, {{"epsilon", eps}});
  r = op_case::RunOps({layer_norm, layer_norm_grad},
                      {{"x", DType::kFloat32, {rows, n}, x},
                       {"scale", DType::kFloat32, {n}, scale},
                       {"bias", DType::kFloat32, {n}, bias},
                       {"dy", DType::kFloat32, {rows, n}, dy}},
                      HostDevice());
  EXPECT_EQ(r.values.at("y"), AsDoubles(ln));
  EXPECT_EQ(r.values.at("mean"), AsDoubles(mean));
  EXPECT_EQ(r.values.at("var"), AsDoubles(var));
  EXPECT_EQ(r.values.at("dx"), AsDoubles(lndx));
  EXPECT_EQ(r.values.at("dscale"), AsDoubles(dscale));
  EXPECT_EQ(r.values.at("dbias"), AsDoubles(dbias));

  // SumArrays over three inputs, and bfloat16 there and back.
  const std::vector<double> b = Values(rows * n, -2.5), c = Values(rows * n, 1e3);
  const std::vector<float> bf = AsFloats(b), cf = AsFloats(c);
  std::vector<float> sum(rows * n);
  const float* xs[3] = {xf.data(), bf.data(), cf.data()};
  cpu::SumArrays(xs, 3, sum.data(), rows * n);
  OpDesc add("abi_v4_sum", {{"X", {"x", "b", "c"}}}, {{"Out", {"s"}}}, {});
  r = op_case::RunOps({add},
                      {{"x", DType::kFloat32, {rows, n}, x},
                       {"b", DType::kFloat32, {rows, n}, b},
                       {"c", DType::kFloat32, {rows, n}, c}},
                      HostDevice());
  EXPECT_EQ(r.values.at("s"), AsDoubles(sum));
  std::vector<bfloat16> half(rows * n);
  std::vector<float> back(rows * n);
  cpu::ConvertToBf16(cf.data(), half.data(), rows * n);
  cpu::ConvertFromBf16(half.data(), back.data(), rows * n);
  OpDesc round("abi_v4_bf16", {{"X", {"c"}}}, {{"Out", {"h"}}, {"Back", {"back"}}}, {});
  r = op_case::RunOps({round}, {{"c", DType::kFloat32, {rows, n}, c}}, HostDevice());
  EXPECT_EQ(r.values.at("h"), AsDoubles(back));  // read back through bfloat16 -> float
  EXPECT_EQ(r.values.at("back"), AsDoubles(back));
  EXPECT_NE(r.values.at("back"), AsDoubles(cf));  // 1e3-scale values lose bits in bfloat16

  // DotRow per row.
  std::vector<float> dot(rows);
  for (int64_t i = 0; i < rows; ++i) dot[i] = cpu::DotRow(xf.data() + i * n, dyf.data() + i * n, n);
  OpDesc dots("abi_v4_dot", {{"X", {"x"}}, {"Y", {"dy"}}}, {{"Out", {"d"}}}, {});
  r = op_case::RunOps({dots}, {{"x", DType::kFloat32, {rows, n}, x}, {"dy", DType::kFloat32, {rows, n}, dy}},
                      HostDevice());
  EXPECT_EQ(r.values.at("d"), AsDoubles(dot));
}

TEST(CApiV4, FrozenOpComputesWithTheBf16Gemm) {
  Load();
  const int64_t m = 6, k = 10, n = 4;
  const std::vector<double> x = Values(m * k, 1.0), w = Values(k * n, 0.5);
  // What the op's bfloat16 inputs hold: the values rounded to bfloat16.
  std::vector<bfloat16> xb(m * k), wb(k * n);
  const std::vector<float> xf = AsFloats(x), wf = AsFloats(w);
  cpu::ConvertToBf16(xf.data(), xb.data(), m * k);
  cpu::ConvertToBf16(wf.data(), wb.data(), k * n);
  std::vector<float> want(m * n);
  try {
    cpu::GemmBf16(false, false, m, n, k, 1.0f, xb.data(), k, wb.data(), n, 0.0f, want.data(), n);
  } catch (const Error& e) {
    // The sanitizer builds have no oneDNN, so no bfloat16 GEMM: the frozen
    // op must then fail with the core's error, not crash.
    ASSERT_EQ(e.kind(), ErrorKind::kUnimplemented) << e.what();
    OpDesc gemm("abi_v4_gemm_bf16", {{"X", {"x"}}, {"W", {"w"}}}, {{"Out", {"y"}}}, {});
    EXPECT_THROW(
        op_case::RunOps({gemm}, {{"x", DType::kBFloat16, {m, k}, x}, {"w", DType::kBFloat16, {k, n}, w}}, HostDevice()),
        Error);
    GTEST_SKIP() << "no bfloat16 GEMM in this build: " << e.what();
  }
  OpDesc gemm("abi_v4_gemm_bf16", {{"X", {"x"}}, {"W", {"w"}}}, {{"Out", {"y"}}}, {});
  const op_case::Result r =
      op_case::RunOps({gemm}, {{"x", DType::kBFloat16, {m, k}, x}, {"w", DType::kBFloat16, {k, n}, w}}, HostDevice());
  EXPECT_EQ(r.values.at("y"), AsDoubles(want));
}

TEST(CApiV4, FrozenOpSharesTheCpuBackendsOneDnnState) {
  Load();
  OpDesc state("abi_v4_onednn", {}, {{"Out", {"s"}}}, {{"bytes", 1000}});
  const op_case::Result r = op_case::RunOps({state}, {}, HostDevice());
  const std::vector<double>& s = r.values.at("s");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], cpu::HasBf16Gemm() ? 1.0 : 0.0);
  EXPECT_GE(s[1], 1.0);  // a team of one thread at least
  EXPECT_EQ(s[2], 1.0);  // 64-byte aligned
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
