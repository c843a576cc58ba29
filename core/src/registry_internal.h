#pragma once
// Private to the core: the staging area behind Registrar and the commit that
// validates a batch and publishes a new registry snapshot.
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "nabla/device_registry.h"
#include "nabla/op_registry.h"

namespace nabla {

// A device backend a plugin registers (the C ABI's device_backend),
// published with the plugin's ops or not at all.
struct StagedDeviceBackend {
  std::string name;  // the backend's and its device type's
  DeviceBackend backend;
  bool host_fallback = true;
};

struct Registrar::Impl {
  std::string plugin_name;  // origin name ("test" for in-process batches)
  std::string plugin_path;  // "" for in-process batches
  std::string abi;
  std::shared_ptr<void> library;  // set by the plugin loader
  std::vector<std::string> op_order;
  std::unordered_map<std::string, std::unique_ptr<OpInfo>> ops;
  std::vector<std::pair<std::tuple<std::string, DeviceType, DType>, KernelInfo>> kernels;
  std::vector<StagedDeviceBackend> device_backends;
  std::vector<std::string> problems;  // found while staging
  std::string registration_error;     // what the plugin's registration threw

  Origin MakeOrigin(const char* file, int line) const;
};

// Letters, digits and '_', not starting with a digit: op types and device names.
bool IsIdentifier(const std::string& name);

// Validates the batch against the live registry; on success publishes a new
// snapshot in one swap and returns. On any problem throws one Error listing
// every problem, and the live registry is untouched.
void CommitRegistrar(Registrar& registrar);

// Counts the snapshots published so far: a registry read after the
// generation was G is current while the generation is still G. Cheaper
// than CurrentRegistry() (no shared_ptr copy under its lock), for checks on
// every call.
uint64_t RegistryGeneration();

}  // namespace nabla
