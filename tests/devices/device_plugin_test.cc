// Device plugins (NABLA_DEVICE_PLUGIN): found in NABLA_PLUGIN_PATH by their
// symbol tables and listed without being loaded, loaded the first time their
// device is resolved, and a plugin that declares a backend it does not
// register is a one-line error naming the file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"

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

}  // namespace
}  // namespace nabla
