#pragma once
// Private to the core: device plugins (NABLA_DEVICE_PLUGIN, nabla/plugin.h),
// found by the plugin loader and loaded by the device registry on demand.
#include <string>
#include <vector>

namespace nabla::internal {

// The standard device plugin folder: lib/nabla/devices beside the core.
std::string DefaultDevicePluginDir();

// The backend names of the device plugins found (NABLA_PLUGIN_PATH's
// folders, then the standard device folder, looked through once, and any
// file given to PluginManager::Load), without loading any of them.
std::vector<std::string> DevicePluginBackends();

// Loads the device plugin that provides backend `name` (once; later calls
// return at once). Returns its path, or "" when no device plugin provides
// `name`. Throws a one-line Error naming the file when it does not load.
std::string LoadDevicePlugin(const std::string& name);

// The backends registered so far, without looking for device plugins: what
// a plugin's registration checks its names against. It runs under the plugin
// loader's lock, which looking for device plugins takes (a deadlock).
std::vector<std::string> RegisteredDeviceBackendNames();

}  // namespace nabla::internal
