// `nabla devices`: what --device can name: the host CPU and every OpenCL
// platform's devices, with memory and compute units.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "nabla/cpu/cpu.h"
#ifdef NABLA_HAVE_OPENCL
#include "nabla/opencl/opencl.h"
#endif

namespace nabla::app {
namespace {

std::string GiB(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return s;
}

int RunDevices() {
  std::cout << "cpu        the host (OpenBLAS kernels: " << cpu::BlasCoreName() << ")\n";
#ifdef NABLA_HAVE_OPENCL
  const auto platforms = opencl::ListPlatforms();
  if (platforms.empty()) {
    std::cout << "no OpenCL platform found (no ICD in /etc/OpenCL/vendors or OCL_ICD_VENDORS)\n";
    return 0;
  }
  for (const auto& p : platforms) {
    std::cout << "platform   " << p.name << " (" << p.vendor << "), " << p.version << "\n";
    if (p.devices.empty()) std::cout << "           no devices\n";
    for (const auto& d : p.devices) {
      std::cout << "opencl:" << d.index << (d.index < 10 ? "   " : "  ") << d.name << " (" << d.type << ")\n"
                << "           " << d.compute_units << " compute units, " << GiB(d.global_mem_bytes)
                << " global memory, " << GiB(d.max_alloc_bytes) << " max buffer, float64 "
                << (d.fp64 ? "yes" : "no") << "\n"
                << "           " << d.version << ", " << d.opencl_c_version << "\n";
    }
  }
#else
  std::cout << "no OpenCL backend in this build (configured with NABLA_WITH_OPENCL=OFF)\n";
#endif
  return 0;
}

}  // namespace

Command DevicesCommand() {
  Command c("devices", "List the devices --device can name: cpu and each OpenCL device with its memory and compute units");
  c.WithoutPlugins();
  c.SetRun([](const GlobalOptions&) { return RunDevices(); });
  return c;
}

}  // namespace nabla::app
