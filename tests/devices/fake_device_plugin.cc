// A device plugin for device_plugin_test, built twice: `tick` registers its
// backend (host memory under a device type of its own) when it loads;
// `mute` declares a backend but registers none, which the core must report.
#include <string>
#include <vector>

#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/plugin.h"

namespace {

#if NABLA_TEST_REGISTERS
class TickDevice final : public nabla::Device {
 public:
  nabla::DeviceType Type() const override { return nabla::RegisterDeviceType("tick"); }
  std::string Name() const override { return "tick:0"; }
  void* Allocate(size_t bytes) override { return nabla::HostDevice().Allocate(bytes); }
  void Free(void* p, size_t bytes) override { nabla::HostDevice().Free(p, bytes); }
  void CopyFromHost(void* d, const void* s, size_t n) override { nabla::HostDevice().CopyFromHost(d, s, n); }
  void CopyToHost(void* d, const void* s, size_t n) override { nabla::HostDevice().CopyToHost(d, s, n); }
  void CopyOnDevice(void* d, const void* s, size_t n) override { nabla::HostDevice().CopyOnDevice(d, s, n); }
};

const bool registered = [] {
  nabla::DeviceBackend b;
  b.enumerate = [] { return std::vector<nabla::DeviceListing>{{"tick:0", {"a test device plugin"}, true}}; };
  b.open = [](int index) -> nabla::Device& {
    NABLA_ENFORCE(index <= 0, kNotFound, "no device tick:", index, "; available: tick:0");
    static TickDevice* device = new TickDevice;
    return *device;
  };
  nabla::RegisterDeviceBackend("tick", std::move(b));
  return true;
}();
#endif

}  // namespace

NABLA_DEVICE_PLUGIN(NABLA_TEST_DEVICE);
