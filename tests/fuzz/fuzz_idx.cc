// IDX dataset files, plain or gzip (zlib reads both).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "nabla/error.h"
#include "train/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    nabla::train::ReadIdxFile(nabla::fuzz::AsFile(data, size), "x");
  } catch (const nabla::Error&) {
  }
  return 0;
}
