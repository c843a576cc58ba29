#pragma once
// Devices as a registry, the way executors are (RegisterExecutor): a backend
// registers a name with how to list and open its devices, and `--device
// NAME[:N]` (CLI, run configs, Python) resolves through ResolveDevice. The
// opened Device is the backend's allocator and copier. The core knows no
// backend by name except `null`, which it ships: shapes and dtypes only.
#include <functional>
#include <string>
#include <vector>

#include "nabla/device.h"
#include "nabla/export.h"
#include "nabla/types.h"

namespace nabla {

// One device a backend can open, as `nabla devices` prints it.
struct DeviceListing {
  std::string spec;                 // what --device takes: "cpu", "opencl:0"
  std::vector<std::string> detail;  // description lines
  bool fp64 = true;                 // float64 kernels can run there
};

struct DeviceBackend {
  // Lists the devices; may throw (no driver), the message then says why.
  std::function<std::vector<DeviceListing>()> enumerate;
  // Opens (once; the backend owns it) device `index`; -1 when the spec had
  // no ":N". Throws a one-line Error for a device that does not exist.
  std::function<Device&(int index)> open;
  // Says what an empty enumeration means ("no OpenCL platform found ...").
  std::string none_found;
};

// Later registrations of a name replace earlier ones.
//
// A backend in a library of its own is a device plugin (NABLA_DEVICE_PLUGIN
// below) that registers from a static initializer. The core finds such
// files in the standard device folder (lib/nabla/devices, beside the
// standard plugins' lib/nabla/plugins), in NABLA_PLUGIN_PATH and among the
// files given to PluginManager::Load, reading only their symbol tables, and
// loads one the first time ResolveDevice or EnumerateDevices names its
// backend: a run that never names it never maps it or its driver.
NABLA_API void RegisterDeviceBackend(const std::string& name, DeviceBackend backend);
// The registered backends and the device plugins' (not loaded by this).
NABLA_API std::vector<std::string> DeviceBackendNames();
// "NAME" or "NAME:N". An unknown NAME or a malformed spec throws
// kInvalidArgument listing the registered names.
NABLA_API Device& ResolveDevice(const std::string& spec);
// The listings of backend `name`; throws for an unknown name, and with the
// backend's none_found text when it lists nothing.
NABLA_API std::vector<DeviceListing> EnumerateDevices(const std::string& name);
// The listing whose spec is `spec` ("opencl" means "opencl:0"); false if none.
NABLA_API bool FindDeviceListing(const std::string& spec, DeviceListing* out);

// Kernel keys. kCPU and kOpenCL keep their ids (plugins built against them
// stay valid), `null` is 2; a new backend gets the next id from its name. Kernel caches
// are indexed by these ids up to DeviceTypeCount().
NABLA_API DeviceType RegisterDeviceType(const std::string& name);
NABLA_API int DeviceTypeCount();

// What an op with no kernel for a device of `type` does: run its CPU kernel
// on host copies (the default, as on OpenCL), or, when a device plugin turns
// that off, fail naming the op and the device.
NABLA_API void SetHostFallback(DeviceType type, bool allowed);
NABLA_API bool HostFallback(DeviceType type);

// The `null` device: every allocation is one sentinel address, copies do
// nothing. Runs on it are dry runs: runtime shape inference through every op,
// no kernels (see RunOp).
// Its id is fixed (the core ships it) so IsDryRun costs one compare per op.
constexpr DeviceType NullDeviceType() { return static_cast<DeviceType>(2); }
NABLA_API Device& NullDevice();
inline bool IsDryRun(const Device& device) { return device.Type() == NullDeviceType(); }

}  // namespace nabla

// Says once, in a device plugin's library, that it registers device backend
// `backend_name` (an identifier) when it loads; needs nabla/plugin.h (the
// ABI tag, which must be the core's: the library links its C++ classes).
// The loader reads both symbols from the file without running it.
#define NABLA_DEVICE_PLUGIN(backend_name)                                                              \
  extern "C" NABLA_API const char NABLA_PP_CAT(nabla_device_backend_, backend_name)[] = #backend_name; \
  extern "C" NABLA_API const char NABLA_ABI_SYMBOL[] = "device " #backend_name
