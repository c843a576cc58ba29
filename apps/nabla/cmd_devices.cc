// `nabla devices`: what --device can name, backend by backend, as each
// registered device backend lists itself (the built-in ones and those of
// device plugins).
#include <iostream>
#include <string>

#include "command.h"
#include "nabla/device_registry.h"

namespace nabla::app {
namespace {

int RunDevices() {
  for (const std::string& name : DeviceBackendNames()) {
    std::vector<DeviceListing> listings;
    std::string why_none;
    try {
      listings = EnumerateDevices(name);
    } catch (const std::exception& e) {
      why_none = e.what();
    }
    // One spec per device, then its details, indented under it.
    for (const DeviceListing& l : listings) {
      std::cout << l.spec << std::string(l.spec.size() < 11 ? 11 - l.spec.size() : 1, ' ')
                << (l.detail.empty() ? "" : l.detail.front()) << "\n";
      for (size_t i = 1; i < l.detail.size(); ++i) std::cout << std::string(11, ' ') << l.detail[i] << "\n";
    }
    if (listings.empty()) {
      if (why_none.empty()) why_none = "no device found";
      std::cout << name << ": " << why_none << "\n";
    }
  }
  return 0;
}

}  // namespace

std::string RegisteredDeviceNames() {
  std::string s;
  for (const auto& n : DeviceBackendNames()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Command DevicesCommand() {
  Command c("devices", "List the devices --device can name, backend by backend (registered backends: " +
                           RegisteredDeviceNames() + ")");
  // Plugins load first: a device plugin (--plugin, NABLA_PLUGIN_PATH) adds its backend.
  c.SetRun([](const GlobalOptions&) { return RunDevices(); });
  return c;
}

}  // namespace nabla::app
