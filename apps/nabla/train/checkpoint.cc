#include "train/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
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
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

bool ParseSafetensorsDType(const std::string& s, DType* out) {
  static const std::map<std::string, DType> kMap = {
      {"F32", DType::kFloat32}, {"F64", DType::kFloat64}, {"I32", DType::kInt32},
      {"I64", DType::kInt64},   {"BOOL", DType::kBool}};
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

}  // namespace

std::string EncodeSafetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = *sorted[i];
    NABLA_ENFORCE(i == 0 || sorted[i - 1]->first != name, kAlreadyExists, "checkpoint tensor '", name,
                  "' is listed twice");
    NABLA_ENFORCE(name != "__metadata__", kInvalidArgument, "a checkpoint tensor may not be named __metadata__");
    NABLA_ENFORCE(t.IsInitialized(), kPreconditionNotMet, "checkpoint tensor '", name, "' holds no data");
    header[name] = {{"dtype", SafetensorsDType(t.GetDType())},
                    {"shape", t.GetShape()},
                    {"data_offsets", {offset, offset + t.Bytes()}}};
    offset += t.Bytes();
  }
  std::string json = header.dump();
  // The data starts 8-aligned so readers may map it in place.
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::string out;
  out.reserve(8 + json.size() + offset);
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  const size_t data_begin = out.size();
  out.resize(data_begin + offset);
  size_t pos = data_begin;
  for (auto* entry : sorted) {
    const Tensor& t = entry->second;
    if (t.Bytes() == 0) continue;
    t.GetDevice()->CopyToHost(&out[pos], t.RawData(), t.Bytes());
    pos += t.Bytes();
  }
  return out;
}

void WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  WriteFileAtomically(path, EncodeSafetensors(tensors, metadata));
}

SafetensorsFile ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NABLA_ENFORCE(in.good(), kNotFound, path, ": cannot open the safetensors file (", std::strerror(errno), ")");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      NABLA_ENFORCE(it->is_object(), kInvalidArgument, path, ": __metadata__ must be an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        NABLA_ENFORCE(m->is_string(), kInvalidArgument, path, ": __metadata__ value '", m.key(),
                      "' must be a string");
        f.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const Json& e = *it;
    const std::string& name = it.key();
    NABLA_ENFORCE(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
                  kInvalidArgument, path, ": tensor '", name, "' needs dtype, shape and data_offsets");
    DType dtype;
    NABLA_ENFORCE(e["dtype"].is_string() && ParseSafetensorsDType(e["dtype"].get<std::string>(), &dtype),
                  kInvalidArgument, path, ": tensor '", name, "' has dtype ", e["dtype"].dump(),
                  "; expected F32, F64, I32, I64 or BOOL");
    Shape shape;
    for (const auto& d : e["shape"]) {
      NABLA_ENFORCE(d.is_number_integer() && d.get<int64_t>() >= 0, kInvalidArgument, path, ": tensor '", name,
                    "' has a bad shape ", e["shape"].dump());
      shape.push_back(d.get<int64_t>());
    }
    const Json& off = e["data_offsets"];
    NABLA_ENFORCE(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                  kInvalidArgument, path, ": tensor '", name, "' has bad data_offsets ", off.dump());
    const size_t b = off[0].get<size_t>(), end = off[1].get<size_t>();
    Tensor t;
    t.Resize(shape);
    t.SetDType(dtype);
    NABLA_ENFORCE(b <= end && end <= data_size && end - b == t.Bytes(), kInvalidArgument, path, ": tensor '", name,
                  "' of ", DTypeName(dtype), ShapeToString(shape), " needs ", t.Bytes(),
                  " bytes, but its data_offsets are ", off.dump(), " in a data section of ", data_size, " bytes");
    t.Allocate(HostDevice());
    if (t.Bytes() > 0) std::memcpy(t.RawData(), bytes.data() + data_begin + b, t.Bytes());
    f.tensors[name] = std::move(t);
  }
  return f;
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
  auto it = f.metadata.find("epoch");
  if (it != f.metadata.end()) info.epoch = std::stoll(it->second);
  return info;
}

std::string SaveCheckpoint(const std::string& dir, int64_t step, int64_t epoch, const NamedTensors& tensors,
                           const std::map<std::string, std::string>& extra, int keep_last) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  NABLA_ENFORCE(!ec, kExternal, "cannot create the checkpoint folder '", dir, "': ", ec.message());
  std::map<std::string, std::string> meta = extra;
  meta["format"] = "nabla-checkpoint/1";
  meta["step"] = std::to_string(step);
  meta["epoch"] = std::to_string(epoch);
  const std::string path = CheckpointPath(dir, step);
  WriteSafetensors(path, tensors, meta);
  // Only once the new file is in place do older ones go.
  if (keep_last > 0) {
    auto all = ListCheckpoints(dir);
    for (size_t i = 0; i + keep_last < all.size(); ++i) fs::remove(all[i].path, ec);
  }
  return path;
}

}  // namespace nabla::train
