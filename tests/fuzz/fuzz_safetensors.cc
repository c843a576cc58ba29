// Safetensors checkpoints, and the counts --resume reads from their metadata.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "train/checkpoint.h"

// Tensors are allocated on the host device, which the CPU backend provides.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nabla::cpu::InitCpuBackend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    nabla::train::SafetensorsFile f = nabla::train::DecodeSafetensors(bytes, "fuzz.safetensors");
    for (const char* key : {"step", "epoch", "batch"}) {
      if (f.metadata.count(key)) nabla::train::CheckpointCount(f, "fuzz.safetensors", key);
    }
  } catch (const nabla::Error&) {
  }
  return 0;
}
