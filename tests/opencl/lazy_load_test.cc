// The OpenCL backend is a device plugin: this binary links only the core and
// the CPU backend, as `nabla` and the Python module do. Loading the standard
// plugins (whose OpenCL kernels are compiled in) and running on the CPU must
// map neither libnabla_opencl, CLBlast nor an OpenCL driver (PoCL); listing
// the device names must not either; asking for `opencl` loads it, and the
// standard plugins' OpenCL kernels then run there. (The ICD loader,
// libOpenCL.so.1, is mapped regardless where Debian's oneDNN is used: its
// libdnnl.so.2 links it for its GPU runtime. The loader alone loads no
// driver until a platform is queried.)
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

// The OpenCL libraries this process has mapped (/proc/self/maps).
std::vector<std::string> OpenClMappings() {
  std::vector<std::string> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    for (const char* lib : {"libnabla_opencl", "libclblast", "libpocl"}) {
      if (line.find(lib) != std::string::npos && std::find(found.begin(), found.end(), std::string(lib)) == found.end())
        found.push_back(lib);
    }
  }
  return found;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

TEST(OpenClDevicePlugin, LoadsOnlyWhenOpenClIsAskedFor) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  ASSERT_TRUE(CurrentRegistry()->FindKernel("scale", DeviceType::kOpenCL, DType::kFloat32))
      << "math_ops registers its OpenCL kernels without the backend loaded";

  OpDesc scale;
  scale.SetType("scale");
  scale.SetInput("X", {"x"});
  scale.SetOutput("Out", {"y"});
  scale.SetAttr("scale", 3.0f);
  scale.SetAttr("bias", 0.0f);
  scale.SetAttr("bias_after_scale", true);
  const op_case::Input x{"x", DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}};
  const op_case::Result cpu = op_case::RunOps({scale}, {x}, HostDevice());
  EXPECT_EQ(cpu.values.at("y")[5], 18.0);
  EXPECT_EQ(OpenClMappings(), std::vector<std::string>{}) << "a CPU run mapped " << Join(OpenClMappings());

  // The name comes from the file's symbol table, without loading it.
  const std::vector<std::string> names = DeviceBackendNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "opencl"), names.end());
  EXPECT_EQ(OpenClMappings(), std::vector<std::string>{}) << "listing the names mapped " << Join(OpenClMappings());

  Device& cl = ResolveDevice("opencl");
  EXPECT_EQ(cl.Type(), DeviceType::kOpenCL);
  const std::vector<std::string> mapped = OpenClMappings();
  EXPECT_NE(std::find(mapped.begin(), mapped.end(), "libnabla_opencl"), mapped.end()) << Join(mapped);
  EXPECT_NE(std::find(mapped.begin(), mapped.end(), "libclblast"), mapped.end()) << Join(mapped);
  EXPECT_EQ(&ResolveDevice("opencl:0"), &cl) << "loaded once, opened once";

  const op_case::Result on_cl = op_case::RunOps({scale}, {x}, cl);
  EXPECT_EQ(on_cl.devices.at("y"), &cl) << "scale's OpenCL kernel (math_ops) ran on the device";
  op_case::ExpectSame(cpu, on_cl, "scale");
}

}  // namespace
}  // namespace nabla
