// The readers a run meets before its first step: damaged or lying headers are
// one error naming the file and the position, and absurd sizes are refused
// before anything is allocated.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/dataset.h"

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

}  // namespace
}  // namespace nabla::train
