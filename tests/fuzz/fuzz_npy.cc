// .npy files (feeds of `nabla exec`, datasets of `nabla run`).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/npy.h"

// Tensors are allocated on the host device, which the CPU backend provides.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nabla::cpu::InitCpuBackend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    nabla::ReadNpy(nabla::fuzz::AsFile(data, size), nabla::HostDevice());
  } catch (const nabla::Error&) {
  }
  return 0;
}
