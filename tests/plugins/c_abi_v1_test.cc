// The plugin frozen at version 1 of the C ABI (tests/plugins/abi_v1/, built
// against the headers copied there and never edited) loads into this core,
// passes its gradient checks and trains: what every later core owes plugins
// built for version 1.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "nabla/cpu/cpu.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

TEST(CApiV1, FrozenPluginLoadsAndPassesItsGradientChecks) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();  // acme_linear's gradient is made of standard ops
  PluginManager::Instance().Load(ABI_V1_PLUGIN);
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  for (const char* type : {"acme_linear", "acme_swish"}) {
    const OpInfo& info = registry->Get(type);
    EXPECT_EQ(info.origin.plugin, "abi_v1_acme");
    const std::vector<GradCheckResult> results = CheckOpGradients(type, HostDevice());
    ASSERT_EQ(results.size(), 2u) << type;
    for (const GradCheckResult& r : results)
      EXPECT_TRUE(r.ok) << type << " " << r.case_name << ": " << (r.failures.empty() ? "" : r.failures[0]);
  }
  for (const auto& p : registry->Plugins()) {
    if (p.name == "abi_v1_acme") {
      EXPECT_EQ(p.abi, "nabla_c_api_v1");
    }
  }
}

// Three Gaussian blobs in 4-D, as examples/plugins/acme/make_data.py writes them.
std::string Blobs(int count, unsigned seed) {
  const double centers[3][4] = {{2.0, 0.0, -1.0, 1.0}, {-2.0, 1.0, 1.0, -1.0}, {0.0, -2.0, 0.5, 2.0}};
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.7);
  std::string csv = "f0,f1,f2,f3,label\n";
  for (int i = 0; i < count; ++i) {
    const int label = i % 3;
    for (int k = 0; k < 4; ++k) csv += std::to_string(centers[label][k] + noise(rng)) + ",";
    csv += std::to_string(label) + "\n";
  }
  return csv;
}

TEST(CApiV1, FrozenPluginTrains) {
  test_util::TempDir dir("abi_v1");
  dir.Write("train.csv", Blobs(300, 1));
  dir.Write("eval.csv", Blobs(90, 2));
  const std::string config = dir.Write("train.yaml", std::string("plugins: [") + ABI_V1_PLUGIN + "]\n" +
                                                         "seed: 1\nprogram: " + ABI_V1_PROGRAM + "\n" +
                                                         R"(loss: loss
optimizer: {type: momentum, lr: 0.1, momentum: 0.9}
data:
  format: csv
  train: {path: train.csv, feeds: {x: "0:4", label: label}}
  eval: {path: eval.csv, feeds: {x: "0:4", label: label}}
  batch_size: 16
epochs: 8
metrics: {accuracy: {}}
)");
  const testing_cli::Result r = testing_cli::RunBinary(
      NABLA_BIN_PATH, "run " + testing_cli::Quote(config) + " --progress none", "", dir.Path("captured"));
  ASSERT_EQ(r.code, 0) << r.err;
  double accuracy = -1;
  for (const std::string& line : r.OutLines())
    if (line.rfind("final eval accuracy: ", 0) == 0) accuracy = std::stod(line.substr(21));
  // Well-separated blobs: wrong ops or gradients would not get there.
  EXPECT_GE(accuracy, 90.0) << r.out;
}

}  // namespace
}  // namespace nabla
