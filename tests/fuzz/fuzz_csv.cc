// CSV datasets: column specs by header name, index and range, with and
// without a header row; the first input byte picks the delimiter.
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
  if (size == 0) return 0;
  const char delimiter = data[0] % 2 == 0 ? ',' : ';';
  const std::string path = nabla::fuzz::AsFile(data + 1, size - 1);
  try {
    nabla::train::ReadCsvDataset(path, {"label", "1:3", "3"}, true, delimiter);
  } catch (const nabla::Error&) {
  }
  try {
    nabla::train::ReadCsvDataset(path, {"0", "1:"}, false, delimiter);
  } catch (const nabla::Error&) {
  }
  return 0;
}
