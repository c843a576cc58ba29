#pragma once
// One function per fuzz target, shared by the libFuzzer entry points
// (fuzz_*.cc, clang builds) and the corpus replay in tests/faults (every
// build), so a crash input checked into corpus/ stays a regression test.
// Each feeds one input to a reader as `nabla` calls it; only nabla::Error may
// come out, anything else (another exception, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/toy_ops.h"
#include "fuzz/fuzz_util.h"
#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/npy.h"
#include "nabla/onnx.h"
#include "nabla/op_registry.h"
#include "nabla/program_io.h"
#include "nabla/train/checkpoint.h"
#include "nabla/train/dataset.h"
#include "nabla/train/run_config.h"

namespace nabla::fuzz {

// Program files: the YAML reader, then the verifier against toy ops that use
// every attribute type, sub-blocks, duplicable and dispensable slots; a
// program that reads must also write and read back.
inline void Program(const uint8_t* data, size_t size) {
  toys::RegisterToyOps();
  try {
    ProgramDesc program = ParseProgram(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    ParseProgram(ProgramToYaml(program), "round-trip.yaml");
    VerifyProgram(program, *CurrentRegistry());
  } catch (const Error&) {
  }
}

// Run configs: every key, type and range check. Paths resolve under a folder
// that does not exist, so nothing is read.
inline void RunConfig(const uint8_t* data, size_t size) {
  try {
    train::ParseRunConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml",
                          "/nonexistent-nabla-fuzz");
  } catch (const Error&) {
  }
}

inline void Npy(const uint8_t* data, size_t size) {
  try {
    ReadNpy(AsFile(data, size), HostDevice());
  } catch (const Error&) {
  }
}

// Checkpoints, and the counts --resume reads from their metadata.
inline void Safetensors(const uint8_t* data, size_t size) {
  try {
    train::SafetensorsFile f =
        train::DecodeSafetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    for (const char* key : {"step", "epoch", "batch"}) {
      if (f.metadata.count(key)) train::CheckpointCount(f, "fuzz.safetensors", key);
    }
  } catch (const Error&) {
  }
}

// IDX, plain or gzip (zlib reads both).
inline void Idx(const uint8_t* data, size_t size) {
  try {
    train::ReadIdxFile(AsFile(data, size), "x");
  } catch (const Error&) {
  }
}

// CSV: column specs by header name, index and range, with and without a
// header row; the first byte picks the delimiter.
inline void Csv(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const char delimiter = data[0] % 2 == 0 ? ',' : ';';
  const std::string path = AsFile(data + 1, size - 1);
  try {
    train::ReadCsvDataset(path, {"label", "1:3", "3"}, true, delimiter);
  } catch (const Error&) {
  }
  try {
    train::ReadCsvDataset(path, {"0", "1:"}, false, delimiter);
  } catch (const Error&) {
  }
}

// ONNX models: the protobuf reader, initializers (sizes against the data),
// folding and the converters, up to the program reader. External data
// resolves under a folder that does not exist, so nothing is read.
inline void Onnx(const uint8_t* data, size_t size) {
  try {
    onnx_io::ImportOnnxBytes(std::string(reinterpret_cast<const char*>(data), size),
                             "/nonexistent-nabla-fuzz/fuzz.onnx");
  } catch (const Error&) {
  }
}

}  // namespace nabla::fuzz
