// Device plugins (NABLA_DEVICE_PLUGIN): found in NABLA_PLUGIN_PATH by their
// symbol tables and listed without being loaded, loaded the first time their
// device is resolved, and a plugin that declares a backend it does not
// register is a one-line error naming the file. `nabla exec --backward
// --fuse` on such a device runs the program unfused, as on any device but
// the cpu.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/npy.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

bool Mapped(const std::string& lib) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(lib) != std::string::npos) return true;
  return false;
}

// One test: the folders are looked through once per process.
TEST(DevicePlugins, ListedUnloadedThenLoadedOnFirstUse) {
  ASSERT_EQ(setenv("NABLA_PLUGIN_PATH", NABLA_DEVICE_PLUGIN_DIR, 1), 0);
  cpu::InitCpuBackend();
  ASSERT_EQ(&ResolveDevice("cpu"), &HostDevice());

  const std::vector<std::string> names = DeviceBackendNames();
  for (const char* n : {"cpu", "tick", "mute"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n << " is not listed";
  EXPECT_FALSE(Mapped("libtick_device.so")) << "listing the names loaded the plugin";

  Device& tick = ResolveDevice("tick");
  EXPECT_EQ(tick.Name(), "tick:0");
  EXPECT_STREQ(DeviceTypeName(tick.Type()), "tick");
  EXPECT_TRUE(Mapped("libtick_device.so"));
  EXPECT_EQ(&ResolveDevice("tick:0"), &tick);
  ASSERT_EQ(EnumerateDevices("tick").size(), 1u);

  try {
    ResolveDevice("mute");
    ADD_FAILURE() << "a plugin that registers nothing resolved";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("libmute_device.so' declares device 'mute'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The fusion pass runs on the cpu only (fused ops have cpu kernels alone).
// The pass pipeline took its device from --device's name before the device
// was opened, and a device plugin loaded on first use has no type by that
// name until then: fusion ran for tick, whose host fallback then ran the
// fused op's cpu kernel (its note said so).
TEST(DevicePlugins, ExecDoesNotFuseForADevicePluginLoadedOnFirstUse) {
  test_util::TempDir dir("nabla_device_plugin_test");
  const std::string program = dir.Write("p.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 3], dtype: float32, stop_gradient: true}
      b: {shape: [3], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [b]}, outputs: {Out: [h]}, attrs: {axis: 1}}
      - {type: relu, inputs: {X: [h]}, outputs: {Out: [r]}}
      - {type: mean, inputs: {X: [r]}, outputs: {Out: [loss]}}
)");
  cpu::InitCpuBackend();
  Tensor t;
  float* px = t.Allocate<float>(HostDevice(), {2, 3});
  std::fill(px, px + t.Numel(), -1.0f);
  const std::string x = dir.Path("x.npy");
  WriteNpy(x, t);
  const std::string args = "exec " + testing_cli::Quote(program) +
                           " --backward loss --fuse --feed x=" + testing_cli::Quote(x) + " --fetch loss --plugin " +
                           testing_cli::Quote(std::string(NABLA_DEVICE_PLUGIN_DIR) + "/libtick_device.so");
  testing_cli::Result r =
      testing_cli::RunBinary(NABLA_BIN_PATH, args + " --device tick", "NABLA_PLUGIN_PATH=", dir.Path("c"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("loss: float32[1]\n[0]"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("op 'relu' has no tick kernel for float32"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("fused"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nabla
