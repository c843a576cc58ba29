// Platform and device discovery. A machine without any OpenCL driver (no
// ICD file) is normal: ListPlatforms() is then empty, and asking for a
// device says so in one line.
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "cl_common.h"
#include "nabla/device_registry.h"
#include "nabla/plugin.h"

namespace nabla::opencl {

std::string DeviceString(cl_device_id device, cl_device_info param) {
  size_t size = 0;
  CheckCl(clGetDeviceInfo(device, param, 0, nullptr, &size), "clGetDeviceInfo");
  std::string s(size, '\0');
  CheckCl(clGetDeviceInfo(device, param, size, s.data(), nullptr), "clGetDeviceInfo");
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string PlatformString(cl_platform_id platform, cl_platform_info param) {
  size_t size = 0;
  CheckCl(clGetPlatformInfo(platform, param, 0, nullptr, &size), "clGetPlatformInfo");
  std::string s(size, '\0');
  CheckCl(clGetPlatformInfo(platform, param, size, s.data(), nullptr), "clGetPlatformInfo");
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

namespace {

template <typename T>
T DeviceValue(cl_device_id device, cl_device_info param) {
  T value{};
  CheckCl(clGetDeviceInfo(device, param, sizeof value, &value, nullptr), "clGetDeviceInfo");
  return value;
}

std::vector<cl_platform_id> PlatformIds() {
  cl_uint count = 0;
  cl_int status = clGetPlatformIDs(0, nullptr, &count);
  // ocl-icd answers -1001 when no vendor file exists: no platform, no error.
  if (status == -1001 || count == 0) return {};
  CheckCl(status, "clGetPlatformIDs");
  std::vector<cl_platform_id> ids(count);
  CheckCl(clGetPlatformIDs(count, ids.data(), nullptr), "clGetPlatformIDs");
  return ids;
}

std::vector<cl_device_id> DevicesOf(cl_platform_id platform) {
  cl_uint count = 0;
  cl_int status = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &count);
  if (status == CL_DEVICE_NOT_FOUND || count == 0) return {};
  CheckCl(status, "clGetDeviceIDs");
  std::vector<cl_device_id> ids(count);
  CheckCl(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, ids.data(), nullptr), "clGetDeviceIDs");
  return ids;
}

std::string TypeName(cl_device_type type) {
  if (type & CL_DEVICE_TYPE_GPU) return "gpu";
  if (type & CL_DEVICE_TYPE_CPU) return "cpu";
  if (type & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  return "other";
}

}  // namespace

std::vector<DeviceIds> AllDeviceIds() {
  std::vector<DeviceIds> out;
  for (cl_platform_id p : PlatformIds())
    for (cl_device_id d : DevicesOf(p)) out.push_back({p, d});
  return out;
}

std::vector<PlatformInfo> ListPlatforms() {
  std::vector<PlatformInfo> platforms;
  int index = 0;
  std::vector<cl_platform_id> ids = PlatformIds();
  for (size_t pi = 0; pi < ids.size(); ++pi) {
    cl_platform_id p = ids[pi];
    PlatformInfo info;
    info.name = PlatformString(p, CL_PLATFORM_NAME);
    info.vendor = PlatformString(p, CL_PLATFORM_VENDOR);
    info.version = PlatformString(p, CL_PLATFORM_VERSION);
    for (cl_device_id d : DevicesOf(p)) {
      DeviceInfo di;
      di.index = index++;
      di.platform_index = static_cast<int>(pi);
      di.name = DeviceString(d, CL_DEVICE_NAME);
      di.vendor = DeviceString(d, CL_DEVICE_VENDOR);
      di.version = DeviceString(d, CL_DEVICE_VERSION);
      di.driver_version = DeviceString(d, CL_DRIVER_VERSION);
      di.opencl_c_version = DeviceString(d, CL_DEVICE_OPENCL_C_VERSION);
      di.type = TypeName(DeviceValue<cl_device_type>(d, CL_DEVICE_TYPE));
      di.global_mem_bytes = DeviceValue<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
      di.max_alloc_bytes = DeviceValue<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
      di.local_mem_bytes = DeviceValue<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE);
      di.compute_units = DeviceValue<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS);
      di.max_work_group_size = DeviceValue<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
      di.fp64 = DeviceString(d, CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
      info.devices.push_back(std::move(di));
    }
    platforms.push_back(std::move(info));
  }
  return platforms;
}

namespace {

std::string Available(const std::vector<PlatformInfo>& platforms) {
  std::string s;
  for (const auto& p : platforms)
    for (const auto& d : p.devices) s += StrCat(s.empty() ? "" : ", ", "opencl:", d.index, " (", d.name, ")");
  return s;
}

}  // namespace

OpenClDevice& GetDevice(int index) {
  static std::mutex mutex;
  // Leaked on purpose: tensors in static storage may free into a device
  // during exit, and the driver may already be gone by then.
  static auto& devices = *new std::vector<std::unique_ptr<ClDevice>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (index >= 0 && static_cast<size_t>(index) < devices.size() && devices[index]) return *devices[index];
  std::vector<PlatformInfo> platforms = ListPlatforms();
  NABLA_ENFORCE(!platforms.empty(), kNotFound,
                "no OpenCL platform found: install an OpenCL driver (e.g. Debian's pocl-opencl-icd) or use --device "
                "cpu");
  const DeviceInfo* found = nullptr;
  for (const auto& p : platforms)
    for (const auto& d : p.devices)
      if (d.index == index) found = &d;
  NABLA_ENFORCE(found != nullptr, kNotFound, "no OpenCL device opencl:", index,
                "; available: ", Available(platforms).empty() ? std::string("none") : Available(platforms));
  if (devices.size() <= static_cast<size_t>(index)) devices.resize(index + 1);
  devices[index] = std::make_unique<ClDevice>(*found);
  return *devices[index];
}

Device& ResolveDevice(const std::string& spec) { return nabla::ResolveDevice(spec); }

namespace {

std::string GiB(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return s;
}

// Registered when this library loads (a static initializer): the core loads
// it as a device plugin when `opencl` is first asked for, and the tests that
// link it get it at start.
const bool registered = [] {
  DeviceBackend backend;
  backend.enumerate = [] {
    std::vector<DeviceListing> out;
    for (const auto& p : ListPlatforms()) {
      for (const auto& d : p.devices) {
        out.push_back({StrCat("opencl:", d.index),
                       {StrCat(d.name, " (", d.type, "), platform ", p.name, " (", p.vendor, ")"),
                        StrCat(d.compute_units, " compute units, ", GiB(d.global_mem_bytes), " global memory, ",
                               GiB(d.max_alloc_bytes), " max buffer, float64 ", d.fp64 ? "yes" : "no"),
                        StrCat(d.version, ", ", d.opencl_c_version)},
                       d.fp64});
      }
    }
    return out;
  };
  backend.open = [](int index) -> Device& { return GetDevice(index < 0 ? 0 : index); };
  backend.none_found =
      "no OpenCL platform found, or none with a device (no ICD in /etc/OpenCL/vendors or OCL_ICD_VENDORS)";
  RegisterDeviceBackend("opencl", std::move(backend));
  return true;
}();

}  // namespace

}  // namespace nabla::opencl

// This library is the device plugin of backend `opencl` (read from the file
// by the core before it loads it).
NABLA_DEVICE_PLUGIN(opencl);
