// libFuzzer entry point for nabla::fuzz::Onnx (targets.h).
#include <cstddef>
#include <cstdint>

#include "fuzz/targets.h"
#include "nabla/cpu/cpu.h"

// Tensors are allocated on the host device, which the CPU backend provides.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nabla::cpu::InitCpuBackend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::Onnx(data, size);
  return 0;
}
