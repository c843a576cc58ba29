#include "nabla/device_registry.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "device_plugins.h"
#include "nabla/error.h"

namespace nabla {
namespace {

// Device types: ids are indices. A deque so DeviceTypeName's c_str() stays
// valid while later types are added.
struct TypeTable {
  std::mutex mutex;
  std::deque<std::string> names{"cpu", "opencl", "null"};  // the ids of kCPU, kOpenCL, NullDeviceType()
  std::vector<DeviceType> no_host_fallback;                // few: a linear scan
};
TypeTable& Types() {
  static TypeTable* t = new TypeTable();  // leaked: kernels may be looked up during exit
  return *t;
}

struct BackendTable {
  std::mutex mutex;
  std::map<std::string, DeviceBackend> backends;
};
BackendTable& Backends();

class NullDeviceImpl final : public Device {
 public:
  DeviceType Type() const override { return NullDeviceType(); }
  std::string Name() const override { return "null"; }
  // One sentinel for every allocation: tensors get a buffer (so they count
  // as initialized and carry shape and dtype) but hold no data. Nothing
  // writes through it: copies are no-ops and no kernel runs on this device.
  void* Allocate(size_t) override { return sentinel_; }
  void Free(void*, size_t) override {}
  void CopyFromHost(void*, const void*, size_t) override {}
  void CopyToHost(void*, const void*, size_t) override {}
  void CopyOnDevice(void*, const void*, size_t) override {}

 private:
  alignas(64) char sentinel_[64] = {};
};

std::string Names() {
  std::string s;
  for (const auto& n : DeviceBackendNames()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

BackendTable& Backends() {
  static BackendTable* t = [] {
    auto* table = new BackendTable();  // leaked: devices outlive static tensors
    DeviceBackend null;
    null.enumerate = [] {
      return std::vector<DeviceListing>{
          {"null", {"shapes and dtypes only, no data: a dry run of shape inference"}, true}};
    };
    null.open = [](int index) -> Device& {
      NABLA_ENFORCE(index <= 0, kNotFound, "no device null:", index, "; the null backend has only null:0");
      return NullDevice();
    };
    table->backends["null"] = std::move(null);
    return table;
  }();
  return *t;
}

}  // namespace

DeviceType RegisterDeviceType(const std::string& name) {
  TypeTable& t = Types();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (size_t i = 0; i < t.names.size(); ++i)
    if (t.names[i] == name) return static_cast<DeviceType>(i);
  t.names.push_back(name);
  return static_cast<DeviceType>(t.names.size() - 1);
}

int DeviceTypeCount() {
  TypeTable& t = Types();
  std::lock_guard<std::mutex> lock(t.mutex);
  return static_cast<int>(t.names.size());
}

void SetHostFallback(DeviceType type, bool allowed) {
  TypeTable& t = Types();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto& off = t.no_host_fallback;
  off.erase(std::remove(off.begin(), off.end(), type), off.end());
  if (!allowed) off.push_back(type);
}

bool HostFallback(DeviceType type) {
  TypeTable& t = Types();
  std::lock_guard<std::mutex> lock(t.mutex);
  return std::find(t.no_host_fallback.begin(), t.no_host_fallback.end(), type) == t.no_host_fallback.end();
}

const char* DeviceTypeName(DeviceType type) {
  TypeTable& t = Types();
  std::lock_guard<std::mutex> lock(t.mutex);
  const size_t i = static_cast<size_t>(type);
  return i < t.names.size() ? t.names[i].c_str() : "unregistered-device";
}

bool ParseDeviceType(const std::string& name, DeviceType* out) {
  TypeTable& t = Types();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (size_t i = 0; i < t.names.size(); ++i) {
    if (t.names[i] == name) {
      *out = static_cast<DeviceType>(i);
      return true;
    }
  }
  return false;
}

Device& NullDevice() {
  static auto* device = new NullDeviceImpl();
  return *device;
}

void RegisterDeviceBackend(const std::string& name, DeviceBackend backend) {
  NABLA_ENFORCE(!name.empty() && name.find(':') == std::string::npos, kInvalidArgument,
                "device backend name must be non-empty and without ':' but received '", name, "'");
  NABLA_ENFORCE(backend.open != nullptr, kInvalidArgument, "device backend '", name, "' has no open function");
  BackendTable& t = Backends();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.backends[name] = std::move(backend);
}

std::vector<std::string> DeviceBackendNames() {
  // Device plugins not loaded yet count: their names come from their files.
  std::set<std::string> names;
  for (const std::string& n : internal::DevicePluginBackends()) names.insert(n);
  BackendTable& t = Backends();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& [n, b] : t.backends) names.insert(n);
  return {names.begin(), names.end()};
}

namespace internal {
std::vector<std::string> RegisteredDeviceBackendNames() {
  BackendTable& t = Backends();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<std::string> names;
  for (const auto& [n, b] : t.backends) names.push_back(n);
  return names;
}
}  // namespace internal

namespace {
bool FindRegistered(const std::string& name, DeviceBackend* out) {
  BackendTable& t = Backends();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.backends.find(name);
  if (it == t.backends.end()) return false;
  *out = it->second;
  return true;
}

// A registered backend, or the device plugin that provides it, loaded now:
// the only place a device plugin is loaded, so a run that never names its
// device never maps it (nor the driver it links).
DeviceBackend FindBackend(const std::string& name, const std::string& spec) {
  DeviceBackend backend;
  if (FindRegistered(name, &backend)) return backend;
  const std::string path = internal::LoadDevicePlugin(name);
  if (!path.empty()) {
    if (FindRegistered(name, &backend)) return backend;
    NABLA_THROW(kInvalidArgument, "device plugin '", path, "' declares device '", name,
                "' (NABLA_DEVICE_PLUGIN) but registered no such backend when it loaded");
  }
  NABLA_THROW(kInvalidArgument, "unknown device '", spec, "'; registered devices: ", Names(),
              " (written NAME or NAME:N)");
}
}  // namespace

Device& ResolveDevice(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  int index = -1;
  if (colon != std::string::npos) {
    const std::string digits = spec.substr(colon + 1);
    bool ok = !digits.empty() && digits.size() <= 6;
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    NABLA_ENFORCE(ok, kInvalidArgument, "device '", spec, "': expected NAME or NAME:N with N a device index");
    index = std::atoi(digits.c_str());
  }
  return FindBackend(name, spec).open(index);
}

std::vector<DeviceListing> EnumerateDevices(const std::string& name) {
  DeviceBackend b = FindBackend(name, name);
  std::vector<DeviceListing> out = b.enumerate ? b.enumerate() : std::vector<DeviceListing>{};
  NABLA_ENFORCE(!out.empty() || b.none_found.empty(), kNotFound, b.none_found);
  return out;
}

bool FindDeviceListing(const std::string& spec, DeviceListing* out) {
  const bool bare = spec.find(':') == std::string::npos;
  for (const DeviceListing& l : EnumerateDevices(spec.substr(0, spec.find(':')))) {
    // A bare name is the backend's first device, as ResolveDevice opens it.
    if (l.spec == spec || (bare && l.spec == spec + ":0")) {
      *out = l;
      return true;
    }
  }
  return false;
}

}  // namespace nabla
