// Run configs (`nabla run CONFIG.yaml`): every key, type and range check.
// Paths resolve under a folder that does not exist, so nothing is read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "train/run_config.h"

// Tensors are allocated on the host device, which the CPU backend provides.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nabla::cpu::InitCpuBackend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    nabla::train::ParseRunConfig(text, "fuzz.yaml", "/nonexistent-nabla-fuzz");
  } catch (const nabla::Error&) {
  }
  return 0;
}
