#include "nabla/device.h"

#include "nabla/error.h"

namespace nabla {

Device::~Device() = default;

namespace {
Device* g_host_device = nullptr;
}

Device& HostDevice() {
  NABLA_ENFORCE(g_host_device != nullptr, kPreconditionNotMet,
                "no host device: call nabla::cpu::InitCpuBackend() before running programs");
  return *g_host_device;
}

void SetHostDevice(Device* device) { g_host_device = device; }

}  // namespace nabla
