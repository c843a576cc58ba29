// Device plugins through the C ABI (nabla/c_api.h version 2): the skeleton
// device of examples/devices/skeleton (C++ SDK) and toy_cdev (C) load at run
// time, list and open their devices, run programs with the CPU's results,
// and refuse what is wrong with one line: an op without a kernel there, a
// backend registered twice or under a taken name, a NULL callback, an
// allocation the device cannot serve.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "common/op_case.h"
#include "common/temp_dir.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/npy.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

using op_case::Input;
using op_case::RunOps;

class DevicePlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    PluginManager& plugins = PluginManager::Instance();
    plugins.LoadDefaults();  // the skeleton's kernels are for standard ops
    // The op plugin first: its kernel for the device type "skeleton" is
    // registered before any backend of that name exists.
    plugins.Load(TOY_SKELETON_KERNELS);
    plugins.Load(SKELETON);
  }
};

bool HasBackend(const std::string& name) {
  const std::vector<std::string> names = DeviceBackendNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The error of `f`, which must throw a nabla::Error of one line.
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST_F(DevicePlugin, SkeletonIsListedAndOpens) {
  ASSERT_TRUE(HasBackend("skeleton"));
  const std::vector<DeviceListing> listings = EnumerateDevices("skeleton");
  ASSERT_EQ(listings.size(), 1u);
  EXPECT_EQ(listings[0].spec, "skeleton:0");
  ASSERT_EQ(listings[0].detail.size(), 2u);
  EXPECT_NE(listings[0].detail[0].find("host memory the plugin allocates"), std::string::npos);
  EXPECT_TRUE(listings[0].fp64);
  Device& device = ResolveDevice("skeleton");
  EXPECT_EQ(&device, &ResolveDevice("skeleton:0"));  // opened once
  EXPECT_STREQ(DeviceTypeName(device.Type()), "skeleton");
  EXPECT_EQ(device.Name(), "skeleton:0");
  EXPECT_FALSE(HostFallback(device.Type()));
  const std::string m = ErrorOf([] { ResolveDevice("skeleton:2"); });
  EXPECT_NE(m.find("no device skeleton:2: the skeleton backend has one device, skeleton:0"), std::string::npos) << m;
}

// Its kernels (the plugin's for standard ops, and an op plugin's for its own
// op) give the CPU's results, bit for bit, in device memory.
TEST_F(DevicePlugin, SkeletonRunsLikeTheCpu) {
  Device& skeleton = ResolveDevice("skeleton");
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    std::vector<OpDesc> ops = {
        OpDesc("elementwise_add", {{"X", {"x"}}, {"Y", {"b"}}}, {{"Out", {"h"}}}, {{"axis", -1}}),
        OpDesc("relu", {{"X", {"h"}}}, {{"Out", {"y"}}}, {}),
    };
    if (dtype == DType::kFloat32) {
      ops.push_back(OpDesc("toy_triple", {{"X", {"y"}}}, {{"Out", {"z"}}}, {}));
      ops.push_back(OpDesc("toy_copy", {{"X", {"z"}}}, {{"Out", {"w"}}}, {}));
    }
    const std::vector<Input> inputs = {{"x", dtype, {2, 3}, {-1.5, 0.5, 2.0, 3.0, -4.0, 0.25}},
                                       {"b", dtype, {3}, {1.0, -1.0, 0.3}}};
    const op_case::Result cpu = RunOps(ops, inputs, HostDevice());
    const op_case::Result dev = RunOps(ops, inputs, skeleton);
    EXPECT_EQ(dev.values, cpu.values) << DTypeName(dtype);
    for (const auto& [name, device] : dev.devices) EXPECT_EQ(device, &skeleton) << name;
    if (dtype == DType::kFloat32) {
      EXPECT_EQ(dev.values.at("w"), dev.values.at("z"));
    }
  }
}

TEST_F(DevicePlugin, OpWithoutKernelThereNamesTheOpAndTheDevice) {
  const std::string m = ErrorOf([] {
    RunOps({OpDesc("exp", {{"X", {"x"}}}, {{"Out", {"y"}}}, {})}, {{"x", DType::kFloat32, {2}, {1.0, 2.0}}},
           ResolveDevice("skeleton"));
  });
  EXPECT_NE(m.find("op 'exp': no kernel for (skeleton, float32)"), std::string::npos) << m;
  EXPECT_NE(m.find("device skeleton:0 runs no cpu kernels on host copies"), std::string::npos) << m;
  // What a kernel of the device refuses, it says in one line too.
  const std::string b = ErrorOf([] {
    RunOps({OpDesc("elementwise_add", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"z"}}}, {{"axis", -1}})},
           {{"x", DType::kFloat32, {3}, {1, 2, 3}}, {"y", DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}}},
           ResolveDevice("skeleton"));
  });
  EXPECT_NE(b.find("elementwise_add on the skeleton device: Y float32[2, 3] must match X float32[3]"),
            std::string::npos)
      << b;
}

// toy_cdev, written in C, runs ops through their CPU kernels on host copies
// (its backend allows it): every copy goes through its callbacks.
TEST_F(DevicePlugin, CDeviceWithHostFallbackRunsLikeTheCpu) {
  PluginManager::Instance().Load(TOY_CDEV);
  Device& toy = ResolveDevice("toy_cdev");
  EXPECT_EQ(toy.Name(), "toy_cdev:0");
  EXPECT_TRUE(HostFallback(toy.Type()));
  const std::vector<OpDesc> ops = {
      OpDesc("exp", {{"X", {"x"}}}, {{"Out", {"h"}}}, {}),
      OpDesc("elementwise_add", {{"X", {"h"}}, {"Y", {"x"}}}, {{"Out", {"y"}}}, {{"axis", -1}})};
  const std::vector<Input> inputs = {{"x", DType::kFloat32, {4}, {-1.0, 0.0, 0.5, 2.0}}};
  EXPECT_EQ(RunOps(ops, inputs, toy).values, RunOps(ops, inputs, HostDevice()).values);
  // 4096 bytes of memory: 2000 floats do not fit.
  const std::string m = ErrorOf([&] {
    Scope scope;
    op_case::Write(scope, {"x", DType::kFloat32, {2000}, std::vector<double>(2000, 1.0)}, toy);
  });
  EXPECT_NE(m.find("device toy_cdev:0 could not allocate 8000 bytes: toy_cdev has 4096 bytes of memory"),
            std::string::npos)
      << m;
}

// Refused device plugins leave no backend and no op behind.
TEST_F(DevicePlugin, BadBackendsAreRefusedWithOneLine) {
  PluginManager::Instance().Load(TOY_CDEV);
  const struct {
    const char* path;
    const char* backend;
    std::string fragment;
  } cases[] = {
      {TOY_CDEV_TWICE, "toy_cdev2", "device backend 'toy_cdev2' of plugin 'toy_cdev_twice' is registered twice"},
      {TOY_CDEV_NULL_CB, "toy_cdev_null",
       "device backend 'toy_cdev_null' of plugin 'toy_cdev_null_cb': expected every callback but received NULL for "
       "copy_to_host"},
      {TOY_CDEV_AGAIN, "toy_cdev",
       "device backend 'toy_cdev' of plugin 'toy_cdev_again': a device backend of that name is already registered"},
      {TOY_CDEV_IGNORES, "toy_cdev_ignored",
       "expected a device backend name of letters, digits and '_' but received 'toy-cdev'"},
  };
  for (const auto& c : cases) {
    const std::vector<std::string> backends = DeviceBackendNames();
    const size_t plugins = CurrentRegistry()->Plugins().size();
    const std::string m = ErrorOf([&] { PluginManager::Instance().Load(c.path); });
    EXPECT_NE(m.find(c.fragment), std::string::npos) << m;
    EXPECT_NE(m.find(c.path), std::string::npos) << m;
    EXPECT_EQ(DeviceBackendNames(), backends) << c.path;
    EXPECT_EQ(CurrentRegistry()->Plugins().size(), plugins) << c.path;
  }
  EXPECT_FALSE(HasBackend("toy_cdev_ignored"));
}

// Through the binary: `nabla devices` lists the plugin's device, `nabla exec
// --device skeleton` writes what --device cpu writes, and failures are one
// line each.
TEST(DevicePluginCli, ListsRunsAndFailsInOneLine) {
  cpu::InitCpuBackend();  // x.npy below is written from a host tensor
  test_util::TempDir dir("device_plugin_cli");
  const std::string plugin = std::string("--plugin ") + testing_cli::Quote(SKELETON);
  testing_cli::Result r = testing_cli::RunBinary(NABLA_BIN_PATH, "devices " + plugin, "", dir.Path("c"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("skeleton:0 skeleton device: host memory the plugin allocates"), std::string::npos) << r.out;

  Tensor x;
  float* px = x.Allocate<float>(HostDevice(), {4, 3});
  for (int i = 0; i < 12; ++i) px[i] = static_cast<float>(i % 5) - 2.25f;
  WriteNpy(dir.Path("x.npy"), x);
  const std::string program = testing_cli::Quote(std::string(SKELETON_PROGRAMS) + "/add_relu.yaml");
  for (const char* device : {"cpu", "skeleton"}) {
    r = testing_cli::RunBinary(NABLA_BIN_PATH,
                               "exec " + program + " " + plugin + " --device " + device +
                                   " --feed x=" + testing_cli::Quote(dir.Path("x.npy")) + " --fetch y --out " +
                                   testing_cli::Quote(dir.Path(device)),
                               "", dir.Path("c"));
    EXPECT_EQ(r.code, 0) << device << ": " << r.err;
  }
  EXPECT_EQ(testing_cli::Slurp(dir.Path("skeleton/y.npy")), testing_cli::Slurp(dir.Path("cpu/y.npy")));
  EXPECT_FALSE(testing_cli::Slurp(dir.Path("cpu/y.npy")).empty());

  const std::string no_kernel = testing_cli::Quote(std::string(SKELETON_PROGRAMS) + "/no_kernel.yaml");
  r = testing_cli::RunBinary(
      NABLA_BIN_PATH,
      "exec " + no_kernel + " " + plugin + " --device skeleton --feed x=" + testing_cli::Quote(dir.Path("x.npy")), "",
      dir.Path("c"));
  testing_cli::ExpectOneLineError(r, "no kernel", {"no_kernel.yaml", "op 'exp'", "(skeleton, float32)"});

  // A device of 64 bytes cannot hold x (48 bytes) and b (12 bytes, in 64-byte blocks).
  r = testing_cli::RunBinary(NABLA_BIN_PATH,
                             "exec " + program + " " + plugin +
                                 " --device skeleton --feed x=" + testing_cli::Quote(dir.Path("x.npy")) + " --fetch y",
                             "NABLA_SKELETON_MEMORY=64", dir.Path("c"));
  testing_cli::ExpectOneLineError(r, "allocation", {"device skeleton:0 could not allocate", "NABLA_SKELETON_MEMORY"},
                                  1);

  r = testing_cli::RunBinary(NABLA_BIN_PATH, std::string("devices --plugin ") + testing_cli::Quote(TOY_CDEV_NULL_CB),
                             "", dir.Path("c"));
  testing_cli::ExpectOneLineError(r, "null callback", {"libtoy_cdev_null_cb.so", "NULL for copy_to_host"});
}

// opcheck on a forward-only device (the skeleton has forward kernels and no
// host fallback): its ops pass, and each says in a note that training there
// stops at it, instead of a problem per missing grad kernel.
TEST(DevicePluginCli, OpcheckOnAForwardOnlyDeviceNotesTheMissingGradKernels) {
  test_util::TempDir dir("device_plugin_opcheck");
  const std::string plugin = std::string("--plugin ") + testing_cli::Quote(SKELETON);
  const testing_cli::Result r =
      testing_cli::RunBinary(NABLA_BIN_PATH, "opcheck " + plugin + " --op relu --notes", "", dir.Path("c"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("on skeleton:0, case 'kinks_avoided': forward only: no kernel there for its grad op relu_grad, "
                       "and skeleton:0 runs no cpu kernels on host copies, so training there stops at this op"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("0 problems"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace nabla
