// Devices as a registry: names resolve to the backend's device, unknown and
// malformed specs are one-line errors listing what exists, and a backend
// registered here (with a device type of its own) gets its kernels through
// the executors' kernel cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/program.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

// Host memory under a device type of its own: what a new backend looks like
// to the core.
class FakeDevice final : public Device {
 public:
  DeviceType Type() const override { return RegisterDeviceType("fake"); }
  int Id() const override { return 1; }
  std::string Name() const override { return "fake:1"; }
  void* Allocate(size_t bytes) override { return HostDevice().Allocate(bytes); }
  void Free(void* p, size_t bytes) override { HostDevice().Free(p, bytes); }
  void CopyFromHost(void* d, const void* s, size_t n) override { HostDevice().CopyFromHost(d, s, n); }
  void CopyToHost(void* d, const void* s, size_t n) override { HostDevice().CopyToHost(d, s, n); }
  void CopyOnDevice(void* d, const void* s, size_t n) override { HostDevice().CopyOnDevice(d, s, n); }
};

FakeDevice& Fake() {
  static FakeDevice device;
  return device;
}

void RegisterFake() {
  DeviceBackend b;
  b.enumerate = [] { return std::vector<DeviceListing>{{"fake:1", {"a test device"}, false}}; };
  b.open = [](int index) -> Device& {
    NABLA_ENFORCE(index == 1, kNotFound, "no device fake:", index, "; available: fake:1");
    return Fake();
  };
  RegisterDeviceBackend("fake", std::move(b));
  // Out = X + 1 on the fake device, Out = X + 2 on the CPU: the result says
  // which kernel the executor picked.
  static bool ops = false;
  if (ops) return;
  ops = true;
  RegisterOps("devices_test", [](Registrar& r) {
    r.Op("devtest_bump", __FILE__, __LINE__)
        .Input("X", "x")
        .Output("Out", "x + k")
        .InferShape([](InferShapeContext& c) {
          c.SetOutputShape("Out", c.InputShape("X"));
          c.SetOutputDType("Out", c.InputDType("X"));
        });
    auto bump = [](float k) {
      return [k](const ExecutionContext& ctx) {
        const Tensor& x = ctx.Input("X");
        float* o = static_cast<float*>(ctx.Output("Out")->Allocate(ctx.GetDevice()));
        for (int64_t i = 0; i < x.Numel(); ++i) o[i] = x.Data<float>()[i] + k;
      };
    };
    r.Kernel("devtest_bump", RegisterDeviceType("fake"), DType::kFloat32, bump(1), __FILE__, __LINE__);
    r.Kernel("devtest_bump", DeviceType::kCPU, DType::kFloat32, bump(2), __FILE__, __LINE__);
  });
}

class DeviceRegistry : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    RegisterFake();
  }
};

ErrorKind KindOf(const std::string& spec, std::string* message) {
  try {
    ResolveDevice(spec);
  } catch (const Error& e) {
    *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << spec << " resolved";
  return ErrorKind::kAlreadyExists;  // no error: never what a test expects
}

TEST_F(DeviceRegistry, NamesResolveToTheirBackendsDevices) {
  EXPECT_EQ(&ResolveDevice("cpu"), &HostDevice());
  EXPECT_EQ(&ResolveDevice("cpu:0"), &HostDevice());
  EXPECT_EQ(&ResolveDevice("null"), &NullDevice());
  EXPECT_EQ(&ResolveDevice("fake:1"), &Fake());
  const std::vector<std::string> names = DeviceBackendNames();
  for (const char* n : {"cpu", "null", "fake"}) EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_STREQ(DeviceTypeName(Fake().Type()), "fake");
  EXPECT_STREQ(DeviceTypeName(NullDeviceType()), "null");
  EXPECT_STREQ(DeviceTypeName(DeviceType::kOpenCL), "opencl");  // plugins' ids are fixed
  EXPECT_EQ(RegisterDeviceType("fake"), Fake().Type());         // a name keeps its id
  DeviceType parsed;
  ASSERT_TRUE(ParseDeviceType("fake", &parsed));
  EXPECT_EQ(parsed, Fake().Type());
  EXPECT_FALSE(ParseDeviceType("tpu", &parsed));
}

TEST_F(DeviceRegistry, UnknownNameListsTheRegisteredOnes) {
  std::string msg;
  EXPECT_EQ(KindOf("tpu:0", &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("unknown device 'tpu:0'"), std::string::npos) << msg;
  for (const char* n : {"cpu", "fake", "null"}) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST_F(DeviceRegistry, MalformedSpecsAndMissingIndicesAreErrors) {
  std::string msg;
  for (const char* bad : {"cpu:", "cpu:x", "cpu:-1", ":0", "CPU"})
    EXPECT_EQ(KindOf(bad, &msg), ErrorKind::kInvalidArgument) << bad;
  EXPECT_EQ(KindOf("cpu:1", &msg), ErrorKind::kNotFound);
  EXPECT_EQ(KindOf("null:3", &msg), ErrorKind::kNotFound);
  EXPECT_EQ(KindOf("fake:0", &msg), ErrorKind::kNotFound);
  EXPECT_NE(msg.find("available: fake:1"), std::string::npos) << msg;
}

TEST_F(DeviceRegistry, ListingsComeFromTheBackend) {
  DeviceListing l;
  ASSERT_TRUE(FindDeviceListing("fake:1", &l));
  EXPECT_FALSE(l.fp64);
  EXPECT_FALSE(FindDeviceListing("fake:2", &l));
  ASSERT_TRUE(FindDeviceListing("cpu", &l));
  EXPECT_EQ(l.spec, "cpu");
  EXPECT_THROW(EnumerateDevices("tpu"), Error);
}

// The executors cache kernels per registered device type: a type registered
// after the core's two gets its own kernel, not the CPU's.
TEST_F(DeviceRegistry, ExecutorsPickTheKernelOfTheRegisteredDevice) {
  ProgramDesc p;
  p.Root()->AppendOp(OpDesc("devtest_bump", {{"X", {"x"}}}, {{"Out", {"y"}}}, {}));
  for (const char* executor : {"sequential", "taskgraph"}) {
    for (Device* device : std::vector<Device*>{&Fake(), &HostDevice()}) {
      Scope scope;
      float* x = scope.Var("x")->GetTensor().Allocate<float>(*device, {3});
      x[0] = 1, x[1] = 2, x[2] = 3;
      auto exec = CreateExecutor(executor, *device);
      exec->Run(p, 0, scope);
      exec->Run(p, 0, scope);  // the second run goes through the cached kernels
      const float k = device == &Fake() ? 1 : 2;
      const float* y = scope.FindVar("y")->GetTensor().Data<float>();
      EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{1 + k, 2 + k, 3 + k})) << executor;
    }
  }
}

}  // namespace
}  // namespace nabla
