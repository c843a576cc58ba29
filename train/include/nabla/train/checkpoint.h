#pragma once
// Checkpoints as safetensors files (8-byte little-endian header length, a
// JSON header, raw little-endian data), so PyTorch and NumPy users read them.
// Files are written atomically (temp file, fsync, rename): a run killed at
// any moment leaves the last good checkpoint intact.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nabla/tensor.h"

namespace nabla::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The bytes of a safetensors file. Tensor names are sorted; `metadata` goes
// under "__metadata__" (string values only, as the format requires).
std::string EncodeSafetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata);
void WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // on the host device
  std::map<std::string, std::string> metadata;
};
// Errors name the file and what is malformed (header, dtype, offsets, a
// checksum recorded under "data_crc32" that the data fails). Sizes are
// checked against the file before anything is allocated.
SafetensorsFile ReadSafetensors(const std::string& path);
// The same from bytes in memory; `path` only names them in errors.
SafetensorsFile DecodeSafetensors(const std::string& bytes, const std::string& path);
// A count (step, epoch, batch) from a checkpoint's metadata; anything but
// decimal digits is kInvalidArgument naming the file and the key.
int64_t CheckpointCount(const SafetensorsFile& f, const std::string& path, const std::string& key);

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  int64_t epoch = 0;  // completed epochs at the time of writing
};

// "DIR/ckpt-00001200.safetensors".
std::string CheckpointPath(const std::string& dir, int64_t step);
// Creates `dir` when missing; kExternal naming it when that fails.
void EnsureCheckpointDir(const std::string& dir);
// Writes a checkpoint with `step`, `epoch`, a CRC-32 of the data (and
// `extra`) in the metadata, then deletes all but the newest `keep_last` (0: keep all).
// Creates `dir` when missing. Returns the path written.
std::string SaveCheckpoint(const std::string& dir, int64_t step, int64_t epoch, const NamedTensors& tensors,
                           const std::map<std::string, std::string>& extra, int keep_last);
// Every complete checkpoint in `dir`, oldest first. Temp files of an
// interrupted write are not checkpoints and are ignored.
std::vector<CheckpointInfo> ListCheckpoints(const std::string& dir);
std::optional<CheckpointInfo> LatestCheckpoint(const std::string& dir);
// Deletes the temp files that killed checkpoint writes left in `dir`
// (those of writers still running are kept).
void RemoveStaleTempFiles(const std::string& dir);

}  // namespace nabla::train
