// The .npy boundary: byte-exact agreement with np.save, round trips for every
// dtype, and one precise, one-line error per kind of damaged file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/temp_dir.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/npy.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;

// np.save (NumPy 1.24) writes format 1.0 with the dict padded by spaces and a
// newline so that the data starts at byte 128 for these small headers.
std::string NumpyV1(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append(127 - 10 - dict.size(), ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(&s[0], values.data(), s.size());
  return s;
}
std::string BoolBytes(const std::vector<bool>& values) {
  std::string s;
  for (bool b : values) s += static_cast<char>(b ? 1 : 0);
  return s;
}

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }

  std::string PathOf(const std::string& name) const { return (dir_ / name).string(); }
  std::string WriteRaw(const std::string& name, const std::string& bytes) const {
    std::string path = PathOf(name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  static std::string ReadRaw(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Reading `bytes` must fail with `kind`, in one line that names the file
  // and contains `fragment`.
  void ExpectReadError(const std::string& bytes, const std::string& fragment,
                       ErrorKind kind = ErrorKind::kInvalidArgument) {
    std::string path = WriteRaw("bad.npy", bytes);
    try {
      ReadNpy(path, HostDevice());
      ADD_FAILURE() << "reading succeeded; expected an error containing '" << fragment << "'";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(e.kind(), kind) << msg;
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the file: " << msg;
      EXPECT_NE(msg.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    }
  }

  test_util::TempDir dir_{"nabla_npy_test"};
};

const std::string kF32Dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
const std::vector<float> kF32Values = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f};

TEST_F(NpyTest, ReadsWhatNumpyWrites) {
  Tensor f32 = ReadNpy(WriteRaw("f32.npy", NumpyV1(kF32Dict, Bytes(kF32Values))), HostDevice());
  EXPECT_EQ(f32.GetDType(), DType::kFloat32);
  EXPECT_EQ(f32.GetShape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<float>(f32.Data<float>(), f32.Data<float>() + 6), kF32Values);

  Tensor f64 = ReadNpy(WriteRaw("f64.npy", NumpyV1("{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                                                   Bytes(std::vector<double>{3.25}))),
                       HostDevice());
  EXPECT_EQ(f64.GetDType(), DType::kFloat64);
  EXPECT_EQ(f64.GetShape(), Shape{});
  EXPECT_EQ(f64.Data<double>()[0], 3.25);

  Tensor i32 = ReadNpy(WriteRaw("i32.npy", NumpyV1("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
                                                   Bytes(std::vector<int32_t>{-1, 2, 70000}))),
                       HostDevice());
  EXPECT_EQ(i32.GetDType(), DType::kInt32);
  EXPECT_EQ(i32.GetShape(), Shape{3});
  EXPECT_EQ(std::vector<int32_t>(i32.Data<int32_t>(), i32.Data<int32_t>() + 3), (std::vector<int32_t>{-1, 2, 70000}));

  const std::vector<int64_t> i64_values = {-5, int64_t{1} << 40};
  Tensor i64 = ReadNpy(
      WriteRaw("i64.npy", NumpyV1("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }", Bytes(i64_values))),
      HostDevice());
  EXPECT_EQ(i64.GetDType(), DType::kInt64);
  EXPECT_EQ(i64.GetShape(), (Shape{2, 1}));
  EXPECT_EQ(std::vector<int64_t>(i64.Data<int64_t>(), i64.Data<int64_t>() + 2), i64_values);

  Tensor b = ReadNpy(WriteRaw("b.npy", NumpyV1("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }",
                                               BoolBytes({true, false, false, true}))),
                     HostDevice());
  EXPECT_EQ(b.GetDType(), DType::kBool);
  EXPECT_EQ(std::vector<bool>(b.Data<bool>(), b.Data<bool>() + 4), (std::vector<bool>{true, false, false, true}));
}

TEST_F(NpyTest, ReadsFormatVersions2And3) {
  // np.lib.format.write_array(f, np.array([1.5, 2.5], '<f4'), version=(2, 0)), and the same with (3, 0).
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  std::string header = dict + std::string(128 - 12 - dict.size() - 1, ' ') + "\n";
  for (char major : {'\x02', '\x03'}) {
    std::string bytes = std::string("\x93NUMPY", 6) + major + '\0';
    bytes += std::string("\x74\x00\x00\x00", 4) + header + Bytes(std::vector<float>{1.5f, 2.5f});
    Tensor t = ReadNpy(WriteRaw("v.npy", bytes), HostDevice());
    EXPECT_EQ(t.GetShape(), Shape{2});
    EXPECT_EQ(t.Data<float>()[0], 1.5f);
    EXPECT_EQ(t.Data<float>()[1], 2.5f);
  }
}

TEST_F(NpyTest, AcceptsKeysInAnyOrderAndDoubleQuotes) {
  Tensor t = ReadNpy(WriteRaw("o.npy", NumpyV1("{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<f4\"}",
                                               Bytes(kF32Values))),
                     HostDevice());
  EXPECT_EQ(t.GetShape(), (Shape{2, 3}));
  EXPECT_EQ(t.Data<float>()[5], 2.5f);
}

TEST_F(NpyTest, WritesExactlyWhatNumpyWrites) {
  Tensor t;
  float* p = t.Allocate<float>(HostDevice(), {2, 3});
  std::copy(kF32Values.begin(), kF32Values.end(), p);
  std::string path = PathOf("w.npy");
  WriteNpy(path, t);
  EXPECT_EQ(ReadRaw(path), NumpyV1(kF32Dict, Bytes(kF32Values)));

  Tensor scalar;
  scalar.Allocate<double>(HostDevice(), {})[0] = 3.25;
  WriteNpy(path, scalar);
  EXPECT_EQ(ReadRaw(path),
            NumpyV1("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", Bytes(std::vector<double>{3.25})));

  Tensor vec;
  int32_t* v = vec.Allocate<int32_t>(HostDevice(), {3});
  v[0] = -1, v[1] = 2, v[2] = 70000;
  WriteNpy(path, vec);
  EXPECT_EQ(ReadRaw(path), NumpyV1("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
                                   Bytes(std::vector<int32_t>{-1, 2, 70000})));
}

TEST_F(NpyTest, RoundTripsEveryDTypeAndShape) {
  std::string path = PathOf("rt.npy");
  {
    Tensor t;
    int64_t* p = t.Allocate<int64_t>(HostDevice(), {2, 1, 3});
    for (int i = 0; i < 6; ++i) p[i] = (int64_t{1} << 50) - i;
    WriteNpy(path, t);
    Tensor r = ReadNpy(path, HostDevice());
    EXPECT_EQ(r.GetDType(), DType::kInt64);
    EXPECT_EQ(r.GetShape(), (Shape{2, 1, 3}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(r.Data<int64_t>()[i], (int64_t{1} << 50) - i);
  }
  {
    Tensor t;
    bool* p = t.Allocate<bool>(HostDevice(), {5});
    for (int i = 0; i < 5; ++i) p[i] = i % 2 == 0;
    WriteNpy(path, t);
    Tensor r = ReadNpy(path, HostDevice());
    EXPECT_EQ(r.GetDType(), DType::kBool);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(r.Data<bool>()[i], i % 2 == 0);
  }
  {
    Tensor t;
    t.Allocate<float>(HostDevice(), {0, 3});
    WriteNpy(path, t);
    Tensor r = ReadNpy(path, HostDevice());
    EXPECT_EQ(r.GetShape(), (Shape{0, 3}));
    EXPECT_EQ(r.Numel(), 0);
  }
  {
    // A rank high enough that the header no longer fits format 1.0's 16-bit length.
    Shape shape(23000, 1);
    Tensor t;
    t.Allocate<double>(HostDevice(), shape)[0] = -0.125;
    WriteNpy(path, t);
    std::string raw = ReadRaw(path);
    EXPECT_EQ(raw[6], '\x02');
    EXPECT_EQ((raw.size() - 8) % 64, 0u);
    Tensor r = ReadNpy(path, HostDevice());
    EXPECT_EQ(r.GetShape(), shape);
    EXPECT_EQ(r.Data<double>()[0], -0.125);
  }
}

TEST_F(NpyTest, WriteIsAtomicAndLeavesNoTemporaryFiles) {
  Tensor t;
  t.Allocate<float>(HostDevice(), {1})[0] = 7.0f;
  std::string path = PathOf("a.npy");
  WriteRaw("a.npy", "old contents");
  WriteNpy(path, t);
  EXPECT_EQ(ReadNpy(path, HostDevice()).Data<float>()[0], 7.0f);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_.Dir())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "a.npy");
  }
  EXPECT_EQ(files, 1);

  std::string missing_dir = PathOf("no/such/dir/x.npy");
  try {
    WriteNpy(missing_dir, t);
    ADD_FAILURE() << "writing into a missing folder succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kExternal);
    EXPECT_NE(std::string(e.what()).find(missing_dir), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(PathOf("no")));
}

TEST_F(NpyTest, WritingAnEmptyTensorIsAnError) {
  Tensor t;
  t.Resize({2});
  EXPECT_THROW(WriteNpy(PathOf("e.npy"), t), Error);
  EXPECT_FALSE(fs::exists(PathOf("e.npy")));
}

TEST_F(NpyTest, MissingFileIsNotFound) {
  std::string path = PathOf("absent.npy");
  try {
    ReadNpy(path, HostDevice());
    ADD_FAILURE() << "reading a missing file succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot open", 0), 0u) << e.what();
  }
}

TEST_F(NpyTest, BadMagic) {
  ExpectReadError("PK\x03\x04 this is a zip file", "not a .npy file");
  ExpectReadError("", "not a .npy file");
}

TEST_F(NpyTest, TruncatedFiles) {
  std::string good = NumpyV1(kF32Dict, Bytes(kF32Values));
  ExpectReadError(good.substr(0, 7), "truncated .npy file");
  ExpectReadError(good.substr(0, 9), "truncated .npy file");
  ExpectReadError(good.substr(0, 60), "truncated .npy file: the header claims 118 bytes");
  ExpectReadError(good.substr(0, good.size() - 1),
                  "truncated .npy data: shape [2, 3] float32 needs 24 bytes but only 23");
  ExpectReadError(good + "x", "1 unexpected bytes after the data");
}

TEST_F(NpyTest, UnsupportedVersion) {
  std::string bad = NumpyV1(kF32Dict, Bytes(kF32Values));
  bad[6] = '\x04';
  ExpectReadError(bad, "expected 1.0, 2.0 or 3.0 but received 4.0");
}

TEST_F(NpyTest, UnsupportedDTypes) {
  for (const char* descr : {">f4", "<u2", "<f2", "<c8", "|u1", "|O"}) {
    ExpectReadError(NumpyV1(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (1,), }",
                            std::string(8, '\0')),
                    std::string("unsupported .npy dtype '") + descr + "'");
  }
}

TEST_F(NpyTest, FortranOrder) {
  ExpectReadError(NumpyV1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", Bytes(kF32Values)),
                  "Fortran-order arrays are not supported");
}

TEST_F(NpyTest, HeaderGarbage) {
  const std::string data = Bytes(kF32Values);
  ExpectReadError(NumpyV1("{'descr': '<f4', 'shape': (2, 3), }", data), "'fortran_order' is missing");
  ExpectReadError(NumpyV1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", data),
                  "unexpected or repeated key 'x'");
  ExpectReadError(NumpyV1("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", data),
                  "unexpected or repeated key 'descr'");
  ExpectReadError(NumpyV1("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", data),
                  "malformed .npy header: expected '('");
  ExpectReadError(NumpyV1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", data),
                  "expected a non-negative integer dimension");
  ExpectReadError(NumpyV1("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", data), "expected True or False");
  ExpectReadError(NumpyV1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk", data),
                  "expected only padding after the closing '}'");
  ExpectReadError(NumpyV1("{'descr: '<f4', 'fortran_order': False, 'shape': (2, 3), }", data), "malformed .npy header");
  ExpectReadError(NumpyV1("\x01\x02garbage\x7f", data), "malformed .npy header: expected '{'");
  ExpectReadError(NumpyV1("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", data),
                  "dimension too large");
}

TEST_F(NpyTest, BoolBytesMustBeZeroOrOne) {
  ExpectReadError(NumpyV1("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x01\x02\x00", 3)),
                  "bool element 1 holds the byte 2");
}

}  // namespace
}  // namespace nabla
