#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "../common/temp_dir.h"
#include "nabla/cpu/cpu.h"
#include "nabla/npy.h"

namespace fs = std::filesystem;

namespace nabla {
namespace {

struct ParityCase {
  std::string name;
  std::string executor;
  std::string device = "cpu";
  bool fuse = false;  // exec --fuse: the fusion passes before and after the backward part
};

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.name << "/" << c.executor << "/" << c.device << (c.fuse ? "/fused" : "");
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

class Parity : public ::testing::TestWithParam<ParityCase> {};

// Gradients agree with PyTorch (computed in float64) at rtol 2e-4: the
// bound nabla's float32 arithmetic must meet on these small networks.
TEST_P(Parity, GradientsMatchPyTorch) {
  cpu::InitCpuBackend();
  const fs::path dir = fs::path(NABLA_REFERENCE_DIR) / GetParam().name;
  YAML::Node spec = YAML::LoadFile((dir / "case.yaml").string());
  const test_util::TempDir scratch("nabla_parity");
  const fs::path out = scratch / "out";
  std::string cmd = std::string(NABLA_BIN_PATH) + " exec " + Quote((dir / "program.yaml").string()) + " --backward " +
                    spec["loss"].as<std::string>() + " --executor " + GetParam().executor + " --device " +
                    GetParam().device + (GetParam().fuse ? " --fuse" : "");
  for (const auto& f : spec["feeds"])
    cmd += " --feed " + Quote(f.first.as<std::string>() + "=" + (dir / f.second.as<std::string>()).string());
  std::string fetch;
  for (const auto& e : spec["expected"]) fetch += (fetch.empty() ? "" : ",") + e.first.as<std::string>();
  cmd += " --fetch " + Quote(fetch) + " --out " + Quote(out.string()) + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const auto& e : spec["expected"]) {
    const std::string var = e.first.as<std::string>();
    Tensor want = ReadNpy((dir / e.second.as<std::string>()).string(), HostDevice());
    Tensor got = ReadNpy((out / (var + ".npy")).string(), HostDevice());
    ASSERT_EQ(got.GetShape(), want.GetShape()) << var;
    const float* g = got.Data<float>();
    const float* w = want.Data<float>();
    double worst = 0;
    for (int64_t i = 0; i < want.Numel(); ++i) {
      double err = std::abs(g[i] - w[i]) / std::max(std::abs(static_cast<double>(w[i])), 1e-3);
      worst = std::max(worst, err);
    }
    EXPECT_LE(worst, 2e-4) << var << " of " << GetParam().name;
  }
}

std::string CaseName(const ::testing::TestParamInfo<ParityCase>& info) {
  return info.param.name + "_" + info.param.executor + (info.param.device == "cpu" ? "" : "_" + info.param.device) +
         (info.param.fuse ? "_fused" : "");
}

// tests/opencl builds this file again with NABLA_PARITY_OPENCL: the same
// references on the OpenCL device, under that suite's warm kernel cache.
#ifdef NABLA_PARITY_OPENCL
INSTANTIATE_TEST_SUITE_P(OpenCl, Parity,
                         ::testing::Values(ParityCase{"mlp", "sequential", "opencl"},
                                           ParityCase{"cnn", "sequential", "opencl"}),
                         CaseName);
#else
INSTANTIATE_TEST_SUITE_P(
    Networks, Parity,
    ::testing::Values(ParityCase{"softmax_regression", "sequential"}, ParityCase{"softmax_regression", "taskgraph"},
                      ParityCase{"mlp", "sequential"}, ParityCase{"mlp", "taskgraph"},
                      ParityCase{"rnn_unrolled", "sequential"}, ParityCase{"rnn_unrolled", "taskgraph"},
                      ParityCase{"rnn_while", "sequential"}, ParityCase{"rnn_while", "taskgraph"},
                      ParityCase{"shape_ops", "sequential"}, ParityCase{"shape_ops", "taskgraph"},
                      ParityCase{"cnn", "sequential"}, ParityCase{"cnn", "taskgraph"},
                      // The unrolled RNN's shared weights take FuseGradOps's rewrites.
                      ParityCase{"rnn_unrolled", "sequential", "cpu", true},
                      ParityCase{"rnn_unrolled", "taskgraph", "cpu", true}, ParityCase{"mlp", "taskgraph", "cpu", true},
                      // batch_norm + relu run as fused_batch_norm_act.
                      ParityCase{"cnn", "taskgraph", "cpu", true}),
    CaseName);
#endif

}  // namespace
}  // namespace nabla
