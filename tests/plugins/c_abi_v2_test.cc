// The device plugin frozen at version 2 of the C ABI (tests/plugins/abi_v2/,
// built against the headers copied there and never edited) loads into this
// core, lists its device and runs a program there as the CPU does: what every
// later core owes device plugins built for version 2.
#include <gtest/gtest.h>

#include <string>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "nabla/cpu/cpu.h"
#include "nabla/npy.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

TEST(CApiV2, FrozenDevicePluginLoadsWithItsAbiTag) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();  // the skeleton's kernels are for standard ops
  PluginManager::Instance().Load(ABI_V2_PLUGIN);
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v2_skeleton") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v2");
    }
  EXPECT_TRUE(found);
}

TEST(CApiV2, FrozenDevicePluginRunsAsTheCpu) {
  test_util::TempDir dir("abi_v2");
  const std::string plugin = std::string("--plugin ") + testing_cli::Quote(ABI_V2_PLUGIN);
  testing_cli::Result r = testing_cli::RunBinary(NABLA_BIN_PATH, "devices " + plugin, "", dir.Path("c"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("skeleton:0"), std::string::npos) << r.out;

  cpu::InitCpuBackend();
  Tensor x;
  float* px = x.Allocate<float>(HostDevice(), {5, 3});
  for (int i = 0; i < 15; ++i) px[i] = static_cast<float>(i % 7) * 0.5f - 1.25f;
  WriteNpy(dir.Path("x.npy"), x);
  for (const char* device : {"cpu", "skeleton"}) {
    r = testing_cli::RunBinary(NABLA_BIN_PATH,
                               "exec " + testing_cli::Quote(ABI_V2_PROGRAM) + " " + plugin + " --device " + device +
                                   " --feed x=" + testing_cli::Quote(dir.Path("x.npy")) + " --fetch y --out " +
                                   testing_cli::Quote(dir.Path(device)),
                               "", dir.Path("c"));
    ASSERT_EQ(r.code, 0) << device << ": " << r.err;
  }
  const std::string cpu_y = testing_cli::Slurp(dir.Path("cpu/y.npy"));
  EXPECT_FALSE(cpu_y.empty());
  EXPECT_EQ(testing_cli::Slurp(dir.Path("skeleton/y.npy")), cpu_y);
}

}  // namespace
}  // namespace nabla
