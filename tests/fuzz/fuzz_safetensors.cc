// Safetensors checkpoints, and the counts --resume reads from their metadata.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nabla/error.h"
#include "train/checkpoint.h"

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
