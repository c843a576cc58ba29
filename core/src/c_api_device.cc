// The device plugins' part of the C ABI (nabla/c_api.h, version 2): a
// plugin's nabla_device_backend becomes a DeviceBackend of the registry
// (nabla/device_registry.h) whose devices call the plugin's callbacks, so
// the executors, tensors and `--device` treat it like a built-in device.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "c_api_internal.h"
#include "device_plugins.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "registry_internal.h"

namespace nabla {
namespace c_api_detail {
namespace {

// What a plugin handed device_backend, copied (its strings included).
struct CBackend {
  std::string name;
  DeviceType type = DeviceType::kCPU;
  nabla_device_backend desc{};
  std::mutex mutex;
  std::map<int, Device*> opened;  // never closed: tensors of static objects may outlive everything
};

// One device a plugin's backend opened.
class CDevice final : public Device {
 public:
  CDevice(const CBackend& backend, int index, void* state)
      : b_(backend), index_(index), state_(state), name_(StrCat(backend.name, ":", index)) {}

  DeviceType Type() const override { return b_.type; }
  int Id() const override { return index_; }
  std::string Name() const override { return name_; }

  void* Allocate(size_t bytes) override {
    CallbackScope scope;
    // Never 0 bytes: malloc(0) may give NULL, which would read as a failure.
    void* p = b_.desc.allocate(CoreCApi(), b_.desc.user, state_, bytes ? bytes : 1);
    if (p) return p;
    std::string why = TakeCApiError();
    if (why.empty()) why = "the plugin returned no memory and no reason";
    NABLA_THROW(kExternal, "device ", name_, " could not allocate ", bytes, " bytes: ", why);
  }

  void Free(void* ptr, size_t bytes) override {
    // Called from destructors: nothing may escape.
    try {
      CallbackScope scope;
      b_.desc.deallocate(CoreCApi(), b_.desc.user, state_, ptr, bytes ? bytes : 1);
    } catch (...) {
    }
  }

  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    Copy(b_.desc.copy_from_host, "a copy from the host", dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    Copy(b_.desc.copy_to_host, "a copy to the host", dst, src, bytes);
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    Copy(b_.desc.copy_on_device, "a copy on the device", dst, src, bytes);
  }
  void Synchronize() override {
    CallbackScope scope;
    if (b_.desc.synchronize(CoreCApi(), b_.desc.user, state_) != NABLA_C_OK) Fail("synchronize");
  }

  void* State() const { return state_; }

 private:
  void Copy(nabla_device_copy_fn fn, const char* what, void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    CallbackScope scope;
    if (fn(CoreCApi(), b_.desc.user, state_, dst, src, bytes) != NABLA_C_OK)
      Fail(StrCat(what, " of ", bytes, " bytes"));
  }
  [[noreturn]] void Fail(const std::string& what) const {
    std::string why = TakeCApiError();
    if (why.empty()) why = "the plugin failed without setting an error";
    NABLA_THROW(kExternal, "device ", name_, ": ", what, " failed: ", why);
  }

  const CBackend& b_;
  const int index_;
  void* const state_;  // the plugin's, from its open
  const std::string name_;
};

// What enumerate fills through device_list_add.
struct ListSink {
  std::string backend;
  std::vector<DeviceListing> listings;
};

DeviceBackend Wrap(const std::shared_ptr<CBackend>& b, const std::string& none_found) {
  DeviceBackend d;
  d.none_found = none_found;
  d.enumerate = [b] {
    ListSink sink{b->name, {}};
    CallbackScope scope;
    if (b->desc.enumerate(CoreCApi(), b->desc.user, reinterpret_cast<nabla_device_list*>(&sink)) != NABLA_C_OK)
      RaisePluginError("device enumeration");
    return sink.listings;
  };
  d.open = [b](int index) -> Device& {
    const int i = index < 0 ? 0 : index;  // a bare NAME is NAME:0
    std::lock_guard<std::mutex> lock(b->mutex);
    auto it = b->opened.find(i);
    if (it != b->opened.end()) return *it->second;
    void* state = nullptr;
    {
      CallbackScope scope;
      state = b->desc.open(CoreCApi(), b->desc.user, i);
      if (!state) {
        std::string why = TakeCApiError();
        if (why.empty()) why = "the backend opened nothing";
        NABLA_THROW(kNotFound, "no device ", b->name, ":", i, ": ", why);
      }
    }
    Device* device = new CDevice(*b, i, state);  // leaked with its backend, like every opened device
    b->opened[i] = device;
    return *device;
  };
  return d;
}

int32_t ApiDeviceTypeId(const char* name) {
  return Guard<int32_t>(-1, [&] {
    const std::string n = Str(name);
    NABLA_ENFORCE(IsIdentifier(n), kInvalidArgument,
                  "device_type_id: expected a device type name of letters, digits and '_' but received '", n, "'");
    return static_cast<int32_t>(RegisterDeviceType(n));
  });
}

const char* ApiDeviceTypeName(int32_t id) {
  return Guard<const char*>(nullptr, [&]() -> const char* {
    if (id < 0 || id >= DeviceTypeCount()) return nullptr;
    return DeviceTypeName(static_cast<DeviceType>(id));
  });
}

int32_t ApiDeviceBackend(nabla_registrar* r, const nabla_device_backend* desc) {
  return Guard<int32_t>(-1, [&] {
    NABLA_ENFORCE(r, kInvalidArgument, "device_backend: expected the registrar of nabla_plugin_init but received NULL");
    Registrar::Impl& impl = reinterpret_cast<Registrar*>(r)->GetImpl();
    // Also a problem of the batch: a plugin that ignores the error still
    // does not load.
    try {
      const std::string plugin = StrCat("plugin '", impl.plugin_name, "'");
      NABLA_ENFORCE(desc, kInvalidArgument, plugin,
                    ": device_backend: expected a nabla_device_backend but received NULL");
      NABLA_ENFORCE(desc->struct_size >= sizeof(nabla_device_backend), kInvalidArgument, plugin,
                    ": device_backend: expected a nabla_device_backend of ", sizeof(nabla_device_backend),
                    " bytes (struct_size) but received ", desc->struct_size);
      const std::string name = Str(desc->name);
      NABLA_ENFORCE(IsIdentifier(name), kInvalidArgument, plugin,
                    ": expected a device backend name of letters, digits and '_' but received '", name, "'");
      const std::string what = StrCat("device backend '", name, "' of ", plugin);
      NABLA_ENFORCE((desc->flags & ~uint32_t{NABLA_C_DEVICE_HOST_FALLBACK}) == 0, kInvalidArgument, what,
                    ": expected flags of nabla_c_device_flags but received ", desc->flags);
      std::string missing;
      const std::pair<const void*, const char*> callbacks[] = {
          {reinterpret_cast<const void*>(desc->enumerate), "enumerate"},
          {reinterpret_cast<const void*>(desc->open), "open"},
          {reinterpret_cast<const void*>(desc->allocate), "allocate"},
          {reinterpret_cast<const void*>(desc->deallocate), "deallocate"},
          {reinterpret_cast<const void*>(desc->copy_from_host), "copy_from_host"},
          {reinterpret_cast<const void*>(desc->copy_to_host), "copy_to_host"},
          {reinterpret_cast<const void*>(desc->copy_on_device), "copy_on_device"},
          {reinterpret_cast<const void*>(desc->synchronize), "synchronize"},
      };
      for (const auto& [fn, field] : callbacks)
        if (!fn) missing += StrCat(missing.empty() ? "" : ", ", field);
      NABLA_ENFORCE(missing.empty(), kInvalidArgument, what, ": expected every callback but received NULL for ",
                    missing);
      for (const StagedDeviceBackend& s : impl.device_backends)
        NABLA_ENFORCE(s.name != name, kAlreadyExists, what, " is registered twice in the same plugin");
      for (const std::string& live : internal::RegisteredDeviceBackendNames())
        NABLA_ENFORCE(live != name, kAlreadyExists, what,
                      ": a device backend of that name is already registered (a name is registered once)");
      auto backend = std::make_shared<CBackend>();
      backend->name = name;
      backend->type = RegisterDeviceType(name);
      backend->desc = *desc;
      backend->desc.name = nullptr;  // copied above; the plugin's strings may not last
      backend->desc.none_found = nullptr;
      impl.device_backends.push_back(
          {name, Wrap(backend, Str(desc->none_found)), (desc->flags & NABLA_C_DEVICE_HOST_FALLBACK) != 0});
      return static_cast<int32_t>(backend->type);
    } catch (const Error& e) {
      impl.problems.push_back(e.what());
      throw;
    }
  });
}

int32_t ApiDeviceListAdd(nabla_device_list* list, const char* const* lines, size_t line_count, int32_t fp64) {
  return GuardStatus([&] {
    NABLA_ENFORCE(list, kInvalidArgument, "device_list_add: expected the list of enumerate but received NULL");
    ListSink& sink = *reinterpret_cast<ListSink*>(list);
    DeviceListing l;
    l.spec = StrCat(sink.backend, ":", sink.listings.size());
    for (size_t i = 0; i < line_count; ++i) {
      NABLA_ENFORCE(lines && lines[i], kInvalidArgument, "device_list_add of device ", l.spec, ": line ", i,
                    " is NULL");
      l.detail.push_back(lines[i]);
    }
    l.fp64 = fp64 != 0;
    sink.listings.push_back(std::move(l));
  });
}

void* ApiDeviceState(const nabla_device* d) {
  const auto* device = dynamic_cast<const CDevice*>(reinterpret_cast<const Device*>(d));
  return device ? device->State() : nullptr;
}

}  // namespace

void FillDeviceTable(nabla_api* api) {
  api->device_type_id = ApiDeviceTypeId;
  api->device_type_name = ApiDeviceTypeName;
  api->device_backend = ApiDeviceBackend;
  api->device_list_add = ApiDeviceListAdd;
  api->device_state = ApiDeviceState;
}

}  // namespace c_api_detail
}  // namespace nabla
