// The readers a run meets before its first step: damaged or lying headers are
// one error naming the file and the position, and absurd sizes are refused
// before anything is allocated.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/targets.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/program_io.h"
#include "nabla/train/checkpoint.h"
#include "nabla/train/dataset.h"
#include "nabla/train/run_config.h"
#include "test_util.h"

namespace nabla::train {
namespace {

using testing::ErrorOf;
using testing::TempDir;

std::string Le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

std::string Safetensors(const std::string& json, size_t data_bytes) {
  return Le64(json.size()) + json + std::string(data_bytes, '\0');
}

#define EXPECT_ERROR(expr, fragment)                                                \
  do {                                                                              \
    const std::string msg = ErrorOf([&] { (void)(expr); });                         \
    EXPECT_NE(msg.find(fragment), std::string::npos) << "message: '" << msg << "'"; \
  } while (0)

// Tensors are allocated on the host device, which the CPU backend provides.
class ReadersEnv : public ::testing::Environment {
 public:
  void SetUp() override { cpu::InitCpuBackend(); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new ReadersEnv);

TEST(SafetensorsLimits, AbsurdSizesAreErrorsBeforeAllocation) {
  EXPECT_ERROR(DecodeSafetensors(Le64(uint64_t(1) << 40) + "{}", "f.safetensors"),
               "f.safetensors: the header length 1099511627776 runs past the end of the file (10 bytes)");
  EXPECT_ERROR(DecodeSafetensors(Safetensors(R"({"w":{"dtype":"F32","shape":[4611686018427387904],)"
                                             R"("data_offsets":[0,4]}})",
                                             4),
                                 "f.safetensors"),
               "f.safetensors: tensor 'w' has shape [4611686018427387904], more than the 4 data bytes the file holds");
  EXPECT_ERROR(DecodeSafetensors(Safetensors(R"({"w":{"dtype":"F64","shape":[2147483648,2147483648,2147483648],)"
                                             R"("data_offsets":[0,8]}})",
                                             8),
                                 "f.safetensors"),
               "more than the 8 data bytes the file holds");
  EXPECT_ERROR(
      DecodeSafetensors(Safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12), "f.safetensors"),
      "f.safetensors: 8 bytes after the last tensor's data");
  EXPECT_ERROR(
      DecodeSafetensors(Safetensors(R"({"w":{"dtype":"F32","shape":5,"data_offsets":[0,4]}})", 4), "f.safetensors"),
      "tensor 'w' has a bad shape 5");
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(SafetensorsLimits, ChecksumCatchesAFlippedDataByte) {
  Tensor t;
  t.Resize({4});
  t.SetDType(DType::kFloat32);
  t.Allocate(HostDevice());
  for (int i = 0; i < 4; ++i) t.MutableData<float>()[i] = static_cast<float>(i);
  TempDir dir;
  const std::string path = SaveCheckpoint(dir.Path("ckpt"), 3, 0, {{"w", t}}, {{"batch", "0"}}, 0);
  std::string bytes = Slurp(path);
  EXPECT_EQ(ErrorOf([&] { DecodeSafetensors(bytes, path); }), "");
  bytes[bytes.size() - 2] ^= 0x40;
  EXPECT_ERROR(DecodeSafetensors(bytes, "c.safetensors"), "c.safetensors: the data fails its checksum (CRC-32 ");
}

// MNIST-style IDX: magic 0x00000803 (uint8, 3 dims), dims 10 x 2 x 2.
std::string Idx() {
  std::string s = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0, 0, 2};
  for (int i = 0; i < 40; ++i) s += static_cast<char>(i);
  return s;
}

void WriteGzip(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())), static_cast<int>(data.size()));
  gzclose(f);
}

// Damaged compressed bytes used to read as "trailing bytes after the IDX
// data": the gzip trailer's CRC is what fails, and zlib says so.
TEST(DataFiles, DamagedGzipIsZlibsDataCheck) {
  TempDir dir;
  const std::string path = dir.Path("x.idx.gz");
  WriteGzip(path, Idx());
  EXPECT_EQ(ReadIdxFile(path, "x").rows, 10);
  std::string gz = Slurp(path);
  gz[gz.size() - 6] ^= 0x01;  // inside the CRC-32 of the trailer
  dir.Write("x.idx.gz", gz);
  EXPECT_ERROR(ReadIdxFile(path, "x"),
               "x.idx.gz: the compressed data is damaged (zlib: incorrect data check) reading the ");
  gz = Slurp(path);
  dir.Write("x.idx.gz", gz.substr(0, gz.size() - 20));
  EXPECT_ERROR(ReadIdxFile(path, "x"), "x.idx.gz: ");
}

TEST(DataFiles, LyingHeadersAreErrorsBeforeAllocation) {
  TempDir dir;
  std::string idx = Idx();
  idx[4] = idx[5] = idx[6] = idx[7] = '\xff';  // 2^32 - 1 rows of 2 x 2
  dir.Write("big.idx", idx);
  EXPECT_ERROR(ReadIdxFile(dir.Path("big.idx"), "x"),
               "big.idx: the file ends inside the IDX data at byte 56; the header promises 17179869180 bytes of it, "
               "17179869140 more");
  idx[4] = idx[5] = idx[6] = idx[7] = idx[8] = idx[9] = idx[10] = idx[11] = '\x7f';  // 2^62 elements
  dir.Write("big.idx", idx);
  EXPECT_ERROR(ReadIdxFile(dir.Path("big.idx"), "x"), "big.idx: IDX dimensions");
  // fuzz_idx's first find (tests/fuzz/corpus/idx/crash-dims-overflow.idx):
  // int32 dims 0xffffff01 x 0xff400000 overflowed the element count (UBSan).
  dir.Write("overflow.idx", std::string("\x00\x00\x0c\x02\xff\xff\xff\x01\xff\x40\x00\x00\x00\x00\x00\x01"
                                        "\xff\xff\xfe\x00\x00\x00\x03\x00\x00\x00\x04",
                                        27));
  EXPECT_ERROR(ReadIdxFile(dir.Path("overflow.idx"), "x"),
               "overflow.idx: IDX dimensions [4294967041, 4282384384] are implausibly large");
  dir.Write("short.idx", Idx().substr(0, 30));
  EXPECT_ERROR(ReadIdxFile(dir.Path("short.idx"), "x"), "short.idx: the file ends inside the IDX data at byte 30");

  // An .npy header promising 2^40 floats over 8 bytes of data.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size() & 0xff) +
                    static_cast<char>(header.size() >> 8) + header + std::string(8, '\0');
  dir.Write("x.npy", npy);
  EXPECT_ERROR(ReadNpyDataset({{"x", dir.Path("x.npy")}}), "x.npy: truncated .npy data");
}

TEST(DataFiles, CsvBadRowNamesLineAndColumn) {
  TempDir dir;
  dir.Write("d.csv", "a,b\n1,2\n3,oops\n");
  const std::string msg = ErrorOf([&] { ReadCsvDataset(dir.Path("d.csv"), {"a", "b"}, true, ','); });
  EXPECT_NE(msg.find("d.csv:3"), std::string::npos) << msg;
  dir.Write("d.csv", "a,b\n1,2\n3\n");
  const std::string short_row = ErrorOf([&] { ReadCsvDataset(dir.Path("d.csv"), {"a", "b"}, true, ','); });
  EXPECT_NE(short_row.find("d.csv:3"), std::string::npos) << short_row;
}

// A program's var shape whose element count overflows used to wrap (a
// [2^62] parameter ran as float32[0], exit 0).
TEST(ProgramLimits, AbsurdShapesAreErrorsNamingThePosition) {
  const std::string head = "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n      w: {shape: ";
  EXPECT_ERROR(ParseProgram(head + "[2000000000, 2000000000, 2000000000], dtype: float32}\n    ops: []\n", "p.yaml"),
               "p.yaml:6:18: bad 'shape' of var 'w': [2000000000, 2000000000, 2000000000] has more elements than a "
               "64-bit count holds");
  EXPECT_EQ(NumElements({4611686018427387904, 0, 4611686018427387904}), 0);
  EXPECT_ERROR(NumElements({4611686018427387904, 4}), "has more elements than a 64-bit count holds");
  Tensor t;
  t.Resize({4611686018427387904});
  t.SetDType(DType::kFloat32);
  EXPECT_ERROR(t.Allocate(HostDevice()),
               "a float32[4611686018427387904] tensor needs more bytes than memory can address");
}

// Every input of the fuzzers' seed corpus, crash inputs included, replayed
// through the same reader calls in this (non-clang) build: only nabla::Error
// may come out. tests/fuzz/corpus/*/crash-* are the fuzzers' finds.
TEST(FuzzCorpus, EveryInputIsReadOrRejectedCleanly) {
  const std::vector<std::pair<std::string, void (*)(const uint8_t*, size_t)>> targets = {
      {"program", fuzz::Program}, {"run_config", fuzz::RunConfig},
      {"npy", fuzz::Npy},         {"safetensors", fuzz::Safetensors},
      {"idx", fuzz::Idx},         {"csv", fuzz::Csv},
      {"onnx", fuzz::Onnx}};
  int inputs = 0;
  for (const auto& [name, fn] : targets) {
    const std::filesystem::path dir = std::filesystem::path(NABLA_FUZZ_CORPUS_DIR) / name;
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string bytes = Slurp(e.path().string());
      SCOPED_TRACE(e.path().string());
      fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++inputs;
    }
  }
  EXPECT_GE(inputs, 20);
}

// fuzz_run_config's find: a second `program:` key cut the inline program
// text past the end of the file (std::out_of_range, not a nabla::Error).
TEST(FuzzCorpus, ProgramKeyTwiceIsAnError) {
  const std::string text = Slurp(std::string(NABLA_FUZZ_CORPUS_DIR) + "/run_config/crash-program-twice.yaml");
  EXPECT_ERROR(ParseRunConfig(text, "c.yaml", "/nonexistent"), "c.yaml:");
  EXPECT_ERROR(ParseRunConfig("loss: l\nprogram: {format: nabla-program/1}\nprogram:\n", "c.yaml", "/nonexistent"),
               "c.yaml:3:1: duplicate key 'program' (first at 2:1)");
}

}  // namespace
}  // namespace nabla::train
