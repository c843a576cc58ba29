// IDX dataset files, plain or gzip (zlib reads both).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "train/dataset.h"

// Tensors are allocated on the host device, which the CPU backend provides.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nabla::cpu::InitCpuBackend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    nabla::train::ReadIdxFile(nabla::fuzz::AsFile(data, size), "x");
  } catch (const nabla::Error&) {
  }
  return 0;
}
