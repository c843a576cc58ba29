#include "nabla/train/checkpoint.h"

#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/program_io.h"

namespace nabla::train {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char* SafetensorsDType(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kBool:
      return "BOOL";
    case DType::kBFloat16:  // never persistable: the mixed-precision pass keeps parameters float32
      return "BF16";
  }
  return "?";
}

bool ParseSafetensorsDType(const std::string& s, DType* out) {
  static const std::map<std::string, DType> kMap = {{"F32", DType::kFloat32}, {"F64", DType::kFloat64},
                                                    {"I32", DType::kInt32},   {"I64", DType::kInt64},
                                                    {"BOOL", DType::kBool},   {"BF16", DType::kBFloat16}};
  auto it = kMap.find(s);
  if (it == kMap.end()) return false;
  *out = it->second;
  return true;
}

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kSuffix = ".safetensors";

// "ckpt-<digits>.safetensors" exactly; anything else (temp files of an
// interrupted write, user files) is not a checkpoint.
bool ParseCheckpointName(const std::string& name, int64_t* step) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size()) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *step = std::stoll(digits);
  return true;
}

constexpr const char* kChecksumKey = "data_crc32";

std::string Crc32Hex(const char* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    size -= chunk;
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc));
  return buf;
}

// The data section is laid out first so its CRC-32 can go into the header:
// a resume then tells a damaged checkpoint from a good one.
std::string Encode(const NamedTensors& tensors, std::map<std::string, std::string> metadata, bool add_checksum) {
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  Json entries = Json::object();
  size_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = *sorted[i];
    NABLA_ENFORCE(i == 0 || sorted[i - 1]->first != name, kAlreadyExists, "checkpoint tensor '", name,
                  "' is listed twice");
    NABLA_ENFORCE(name != "__metadata__", kInvalidArgument, "a checkpoint tensor may not be named __metadata__");
    NABLA_ENFORCE(t.IsInitialized(), kPreconditionNotMet, "checkpoint tensor '", name, "' holds no data");
    entries[name] = {{"dtype", SafetensorsDType(t.GetDType())},
                     {"shape", t.GetShape()},
                     {"data_offsets", {offset, offset + t.Bytes()}}};
    offset += t.Bytes();
  }
  std::string data(offset, '\0');
  size_t pos = 0;
  for (auto* entry : sorted) {
    const Tensor& t = entry->second;
    if (t.Bytes() == 0) continue;
    t.GetDevice()->CopyToHost(&data[pos], t.RawData(), t.Bytes());
    pos += t.Bytes();
  }
  if (add_checksum) metadata[kChecksumKey] = Crc32Hex(data.data(), data.size());
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  header.update(entries);
  std::string json = header.dump();
  // The data starts 8-aligned so readers may map it in place.
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::string out;
  out.reserve(8 + json.size() + data.size());
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  out += data;
  return out;
}

}  // namespace

std::string EncodeSafetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  return Encode(tensors, metadata, false);
}

void WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  WriteFileAtomically(path, EncodeSafetensors(tensors, metadata));
}

SafetensorsFile DecodeSafetensors(const std::string& bytes, const std::string& path) {
  NABLA_ENFORCE(bytes.size() >= 8, kInvalidArgument, path, ": not a safetensors file: expected at least 8 bytes, ",
                "but received ", bytes.size());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<uint8_t>(bytes[i])) << (8 * i);
  NABLA_ENFORCE(n <= bytes.size() - 8, kInvalidArgument, path, ": the header length ", n,
                " runs past the end of the file (", bytes.size(), " bytes); truncated file?");
  Json header;
  try {
    header = Json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const Json::exception& e) {
    NABLA_THROW(kInvalidArgument, path, ": the safetensors header is not valid JSON: ", e.what());
  }
  NABLA_ENFORCE(header.is_object(), kInvalidArgument, path, ": the safetensors header must be a JSON object");
  SafetensorsFile f;
  const size_t data_begin = 8 + n;
  const size_t data_size = bytes.size() - data_begin;
  if (header.contains("__metadata__")) {
    const Json& md = header["__metadata__"];
    NABLA_ENFORCE(md.is_object(), kInvalidArgument, path, ": __metadata__ must be an object");
    for (auto m = md.begin(); m != md.end(); ++m) {
      NABLA_ENFORCE(m->is_string(), kInvalidArgument, path, ": __metadata__ value '", m.key(), "' must be a string");
      f.metadata[m.key()] = m->get<std::string>();
    }
  }
  // A cut file is named as such before its checksum fails.
  uint64_t data_needed = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__" || !it->is_object() || !it->contains("data_offsets")) continue;
    const Json& off = (*it)["data_offsets"];
    if (off.is_array() && off.size() == 2 && off[1].is_number_unsigned()) {
      data_needed = std::max(data_needed, off[1].get<uint64_t>());
    }
  }
  NABLA_ENFORCE(data_needed <= data_size, kInvalidArgument, path, ": the file is truncated: its tensors need ",
                data_needed, " data bytes, but it holds ", data_size);
  // Checked before any tensor is built, so a damaged file reads as damaged
  // rather than as whatever the flipped bytes happen to decode to.
  auto crc = f.metadata.find(kChecksumKey);
  if (crc != f.metadata.end()) {
    const std::string actual = Crc32Hex(bytes.data() + data_begin, data_size);
    NABLA_ENFORCE(actual == crc->second, kInvalidArgument, path, ": the data fails its checksum (CRC-32 ", actual,
                  ", but the header records ", crc->second, "); the file is damaged");
  }
  size_t data_used = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const Json& e = *it;
    const std::string& name = it.key();
    NABLA_ENFORCE(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
                  kInvalidArgument, path, ": tensor '", name, "' needs dtype, shape and data_offsets");
    DType dtype;
    NABLA_ENFORCE(e["dtype"].is_string() && ParseSafetensorsDType(e["dtype"].get<std::string>(), &dtype),
                  kInvalidArgument, path, ": tensor '", name, "' has dtype ", e["dtype"].dump(),
                  "; expected F32, F64, I32, I64 or BOOL");
    NABLA_ENFORCE(e["shape"].is_array(), kInvalidArgument, path, ": tensor '", name, "' has a bad shape ",
                  e["shape"].dump());
    // The element count is bounded by the data section before anything is
    // allocated: a forged shape of 2^62 elements is an error, not an OOM.
    Shape shape;
    uint64_t bytes_needed = DTypeSize(dtype);
    for (const auto& d : e["shape"]) {
      NABLA_ENFORCE(d.is_number_integer() && d.get<int64_t>() >= 0, kInvalidArgument, path, ": tensor '", name,
                    "' has a bad shape ", e["shape"].dump());
      const uint64_t dim = d.get<uint64_t>();
      NABLA_ENFORCE(dim == 0 || bytes_needed <= data_size / dim || bytes_needed == 0, kInvalidArgument, path,
                    ": tensor '", name, "' has shape ", e["shape"].dump(), ", more than the ", data_size,
                    " data bytes the file holds");
      bytes_needed *= dim;
      shape.push_back(static_cast<int64_t>(dim));
    }
    const Json& off = e["data_offsets"];
    NABLA_ENFORCE(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                  kInvalidArgument, path, ": tensor '", name, "' has bad data_offsets ", off.dump());
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    NABLA_ENFORCE(b <= end && end <= data_size && end - b == bytes_needed, kInvalidArgument, path, ": tensor '", name,
                  "' of ", DTypeName(dtype), ShapeToString(shape), " needs ", bytes_needed,
                  " bytes, but its data_offsets are ", off.dump(), " in a data section of ", data_size, " bytes");
    data_used = std::max<size_t>(data_used, end);
    Tensor t;
    t.Resize(shape);
    t.SetDType(dtype);
    t.Allocate(HostDevice());
    if (t.Bytes() > 0) std::memcpy(t.RawData(), bytes.data() + data_begin + b, t.Bytes());
    f.tensors[name] = std::move(t);
  }
  NABLA_ENFORCE(data_used == data_size, kInvalidArgument, path, ": ", data_size - data_used,
                " bytes after the last tensor's data; the header does not describe the file");
  return f;
}

SafetensorsFile ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NABLA_ENFORCE(in.good(), kNotFound, path, ": cannot open the safetensors file (", std::strerror(errno), ")");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  NABLA_ENFORCE(!in.bad(), kExternal, path, ": reading the safetensors file failed (", std::strerror(errno), ")");
  return DecodeSafetensors(bytes, path);
}

int64_t CheckpointCount(const SafetensorsFile& f, const std::string& path, const std::string& key) {
  auto it = f.metadata.find(key);
  NABLA_ENFORCE(it != f.metadata.end(), kInvalidArgument, path, ": the checkpoint metadata lacks '", key, "'");
  const std::string& v = it->second;
  NABLA_ENFORCE(!v.empty() && v.size() <= 18 && v.find_first_not_of("0123456789") == std::string::npos,
                kInvalidArgument, path, ": checkpoint metadata '", key, "' must be a count (0, 1, 2, ...), but is \"",
                v, "\"");
  return std::stoll(v);
}

namespace {

// For the crash tests: NABLA_TEST_KILL_IN_CHECKPOINT_WRITE=STEP dies by
// SIGKILL half-way through writing that step's checkpoint, leaving what a
// kill at that moment leaves (half a temp file under WriteFileAtomically's
// name). A kill from outside cannot be timed to land inside a write.
void KillHalfWayIfTestAsks(const std::string& path, int64_t step, const std::string& bytes) {
  const char* at = std::getenv("NABLA_TEST_KILL_IN_CHECKPOINT_WRITE");
  if (at == nullptr || std::strtoll(at, nullptr, 10) != step) return;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + ".0";
  std::ofstream(tmp, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  ::raise(SIGKILL);
}

}  // namespace

void RemoveStaleTempFiles(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    // WriteFileAtomically names them "<final>.tmp.<pid>.<n>".
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    const size_t tmp = name.find(std::string(kSuffix) + ".tmp.");
    if (tmp == std::string::npos || !ParseCheckpointName(name.substr(0, tmp + std::strlen(kSuffix)), &step)) continue;
    const std::string rest = name.substr(tmp + std::strlen(kSuffix) + 5);
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    // A live writer (another process on this folder) keeps its file.
    if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;
    stale.push_back(entry.path());
  }
  for (const auto& p : stale) fs::remove(p, ec);
}

void EnsureCheckpointDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  NABLA_ENFORCE(!ec, kExternal, "cannot create the checkpoint folder '", dir, "': ", ec.message());
}

std::string CheckpointPath(const std::string& dir, int64_t step) {
  std::ostringstream name;
  name << kPrefix << std::setw(8) << std::setfill('0') << step << kSuffix;
  return (fs::path(dir) / name.str()).string();
}

std::vector<CheckpointInfo> ListCheckpoints(const std::string& dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t step = 0;
    if (!entry.is_regular_file(ec) || !ParseCheckpointName(entry.path().filename().string(), &step)) continue;
    out.push_back({entry.path().string(), step, 0});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointInfo> LatestCheckpoint(const std::string& dir) {
  auto all = ListCheckpoints(dir);
  if (all.empty()) return std::nullopt;
  CheckpointInfo info = all.back();
  SafetensorsFile f = ReadSafetensors(info.path);
  if (f.metadata.count("epoch")) info.epoch = CheckpointCount(f, info.path, "epoch");
  return info;
}

std::string SaveCheckpoint(const std::string& dir, int64_t step, int64_t epoch, const NamedTensors& tensors,
                           const std::map<std::string, std::string>& extra, int keep_last) {
  EnsureCheckpointDir(dir);
  std::error_code ec;
  std::map<std::string, std::string> meta = extra;
  meta["format"] = "nabla-checkpoint/1";
  meta["step"] = std::to_string(step);
  meta["epoch"] = std::to_string(epoch);
  const std::string path = CheckpointPath(dir, step);
  RemoveStaleTempFiles(dir);
  const std::string bytes = Encode(tensors, meta, /*add_checksum=*/true);
  KillHalfWayIfTestAsks(path, step, bytes);
  WriteFileAtomically(path, bytes);
  // Only once the new file is in place do older ones go.
  if (keep_last > 0) {
    auto all = ListCheckpoints(dir);
    for (size_t i = 0; i + keep_last < all.size(); ++i) fs::remove(all[i].path, ec);
  }
  return path;
}

}  // namespace nabla::train
