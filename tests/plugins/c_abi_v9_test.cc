// The op plugin frozen at version 9 of the C ABI (tests/plugins/abi_v9/,
// built against the headers copied there and never edited) loads into this
// core and computes as it did: its op runs two [rows, n] tensors through
// each of version 9's rows kernels, and every output must be, bit for bit,
// what the backend's one-row kernels (version 4's) give row by row. Bad
// rows arguments are refused with an error naming the function. What every
// later core owes plugins built for version 9.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

void Load() {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(ABI_V9_PLUGIN);
}

TEST(CApiV9, FrozenPluginLoadsWithItsAbiTag) {
  Load();
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v9_ops") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v9");
    }
  EXPECT_TRUE(found);
}

std::vector<float> Floats(const Tensor& t) { return std::vector<float>(t.Data<float>(), t.Data<float>() + t.Numel()); }

void ExpectBits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
}

// Rows in a group of four and past it, of lengths from one vector's tail to
// several vectors.
TEST(CApiV9, FrozenOpGivesTheOneRowKernelsBits) {
  Load();
  for (int64_t rows : {1, 6}) {
    for (int64_t n : {1, 7, 16, 40, 128}) {
      Scope scope;
      std::vector<double> x(static_cast<size_t>(rows * n)), g(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = 3.0 * std::sin(0.37 * static_cast<double>(i) + 0.1) + 0.5;
        g[i] = std::cos(0.91 * static_cast<double>(i));
      }
      op_case::Write(scope, {"x", DType::kFloat32, {rows, n}, x}, HostDevice());
      op_case::Write(scope, {"g", DType::kFloat32, {rows, n}, g}, HostDevice());
      VarNameMap outs;
      for (const char* slot : {"Y", "Mean", "Var", "DX", "DScale", "DBias", "Max", "P", "Sums", "Dots"})
        outs[slot] = {std::string("o_") + slot};
      ProgramDesc program;
      program.Root()->AppendOp(OpDesc("abi_v9_rows", {{"X", {"x"}}, {"G", {"g"}}}, outs, {{"bad", 0}}));
      CreateExecutor("sequential", HostDevice(), ExecutorOptions{})->Run(program, 0, scope);
      auto out = [&](const char* slot) { return Floats(scope.FindVar(std::string("o_") + slot)->GetTensor()); };

      const std::vector<float> xf(x.begin(), x.end()), gf(g.begin(), g.end());
      std::vector<float> y(xf.size()), mean(rows), var(rows), dx(xf.size()), dscale(n, 0.0f), dbias(n, 0.0f);
      std::vector<float> max(rows), p(xf.size(), 0.0f), sums(rows), dots(rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xf.data() + r * n;
        const float* gr = gf.data() + r * n;
        cpu::LayerNormRow(xr, n, nullptr, nullptr, 1e-5f, y.data() + r * n, &mean[r], &var[r]);
        const float rstd = 1.0f / std::sqrt(var[r] + 1e-5f);
        cpu::LayerNormGradRow(xr, gr, n, mean[r], rstd, nullptr, dx.data() + r * n, dscale.data(), dbias.data());
        for (int64_t j = 0; j < n; ++j) dx[r * n + j] = gr[j] + dx[r * n + j];
        const int64_t len = std::min(r + 1, n);
        max[r] = cpu::RowMax(xr, len);
        sums[r] = cpu::ExpShiftedSum(xr, max[r], p.data() + r * n, len);
        dots[r] = cpu::DotRow(xr, gr, n);
      }
      const std::string at = std::to_string(rows) + " x " + std::to_string(n) + ": ";
      ExpectBits(out("Y"), y, at + "Y");
      ExpectBits(out("Mean"), mean, at + "Mean");
      ExpectBits(out("Var"), var, at + "Var");
      ExpectBits(out("DX"), dx, at + "DX");
      ExpectBits(out("DScale"), dscale, at + "DScale");
      ExpectBits(out("DBias"), dbias, at + "DBias");
      ExpectBits(out("Max"), max, at + "Max");
      ExpectBits(out("P"), p, at + "P");
      ExpectBits(out("Sums"), sums, at + "Sums");
      ExpectBits(out("Dots"), dots, at + "Dots");
    }
  }
}

// The table's functions refuse what the backend cannot take, naming
// themselves and the argument at fault; the plugin's SDK throws the error
// and the op fails with it.
TEST(CApiV9, RowsFunctionsRefuseBadArguments) {
  Load();
  const std::pair<int, std::string> cases[] = {
      {1, "cpu_exp_shifted_rows: row 1 has length 5, outside [0, 4]"},
      {2, "cpu_row_max_rows: ld = 3 is shorter than a row (5)"},
      {3, "cpu_layer_norm_rows: expected rows of n >= 1, but received n = 0"},
      {4, "cpu_layer_norm_grad_rows: acc needs a dx to add to"},
      {5, "cpu_dot_rows: lda = 3 and ldb = 4 must be at least n = 4"},
  };
  for (const auto& [bad, message] : cases) {
    Scope scope;
    op_case::Write(scope, {"x", DType::kFloat32, {2, 4}, std::vector<double>(8, 1.0)}, HostDevice());
    op_case::Write(scope, {"g", DType::kFloat32, {2, 4}, std::vector<double>(8, 1.0)}, HostDevice());
    VarNameMap outs;
    for (const char* slot : {"Y", "Mean", "Var", "DX", "DScale", "DBias", "Max", "P", "Sums", "Dots"})
      outs[slot] = {std::string("o_") + slot};
    ProgramDesc program;
    program.Root()->AppendOp(OpDesc("abi_v9_rows", {{"X", {"x"}}, {"G", {"g"}}}, outs, {{"bad", bad}}));
    try {
      CreateExecutor("sequential", HostDevice(), ExecutorOptions{})->Run(program, 0, scope);
      ADD_FAILURE() << "bad " << bad << " ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "bad " << bad << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace nabla
