// Program files: the YAML reader, then the verifier and build-time inference
// against toy ops that use every attribute type, sub-blocks, duplicable and
// dispensable slots; a program that reads must also write and read back.
// Only nabla::Error may come out; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/io_toy_ops.h"
#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/program_io.h"

// Tensors are allocated on the host device, which the CPU backend provides.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nabla::cpu::InitCpuBackend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::io_test::RegisterIoToyOps();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    nabla::ProgramDesc program = nabla::ParseProgram(text, "fuzz.yaml");
    const std::string again = nabla::ProgramToYaml(program);
    nabla::ParseProgram(again, "round-trip.yaml");
    nabla::VerifyProgram(program, *nabla::CurrentRegistry());
  } catch (const nabla::Error&) {
  }
  return 0;
}
