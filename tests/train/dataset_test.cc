// Dataset readers on small files the tests write themselves, feed binding,
// batching and seeded shuffling.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "nabla/cpu/cpu.h"
#include "nabla/npy.h"
#include "nabla/train/dataset.h"
#include "test_util.h"

namespace nabla::train {
namespace {

using testing::ErrorOf;
using testing::TempDir;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }
  TempDir dir_;
};

std::string IdxHeader(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int i = 3; i >= 0; --i) s += static_cast<char>((d >> (8 * i)) & 0xff);
  }
  return s;
}

// 3 images of 2x2 uint8 and their labels.
std::string ImagesIdx() {
  std::string s = IdxHeader(0x08, {3, 2, 2});
  for (int i = 0; i < 12; ++i) s += static_cast<char>(i * 20);
  return s;
}
std::string LabelsIdx() { return IdxHeader(0x08, {3}) + std::string{2, 0, 1}; }

void WriteGz(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())), static_cast<int>(data.size()));
  gzclose(f);
}

TEST_F(DatasetTest, IdxPlainAndGzipReadTheSame) {
  std::string plain = dir_.Write("img.idx", ImagesIdx());
  WriteGz(dir_.Path("img.idx.gz"), ImagesIdx());
  for (const std::string& path : {plain, dir_.Path("img.idx.gz")}) {
    Column c = ReadIdxFile(path, "image");
    EXPECT_EQ(c.kind, ElemKind::kUInt8);
    EXPECT_EQ(c.rows, 3);
    EXPECT_EQ(c.sample_shape, (Shape{2, 2}));
    EXPECT_EQ(c.SampleNumel(), 4);
    EXPECT_DOUBLE_EQ(c.ValueAsDouble(5), 100.0);
    EXPECT_DOUBLE_EQ(c.ValueAsDouble(11), 220.0);
  }
}

TEST_F(DatasetTest, IdxMultiByteValuesAreBigEndian) {
  std::string s = IdxHeader(0x0C, {2});
  s += std::string{1, 2, 3, 4};
  s += std::string{static_cast<char>(0xff), static_cast<char>(0xff), static_cast<char>(0xff), static_cast<char>(0xfe)};
  Column c = ReadIdxFile(dir_.Write("v.idx", s), "v");
  EXPECT_EQ(c.kind, ElemKind::kInt32);
  EXPECT_DOUBLE_EQ(c.ValueAsDouble(0), 0x01020304);
  EXPECT_DOUBLE_EQ(c.ValueAsDouble(1), -2);
}

TEST_F(DatasetTest, IdxErrorsNameTheFile) {
  ErrorKind kind;
  std::string e = ErrorOf([&] { ReadIdxFile(dir_.Path("nope.idx.gz"), "x"); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kNotFound);
  EXPECT_NE(e.find("nope.idx.gz: cannot open the dataset file"), std::string::npos) << e;

  std::string truncated = ImagesIdx().substr(0, 20);
  e = ErrorOf([&] { ReadIdxFile(dir_.Write("t.idx", truncated), "x"); });
  EXPECT_NE(e.find("t.idx: the file ends inside the IDX data"), std::string::npos) << e;

  e = ErrorOf([&] { ReadIdxFile(dir_.Write("bad.idx", "PK\x03\x04garbage"), "x"); });
  EXPECT_NE(e.find("bad.idx: not an IDX file"), std::string::npos) << e;

  e = ErrorOf([&] { ReadIdxFile(dir_.Write("long.idx", LabelsIdx() + "x"), "x"); });
  EXPECT_NE(e.find("long.idx: trailing bytes"), std::string::npos) << e;
}

TEST_F(DatasetTest, ColumnsMustAgreeOnRows) {
  std::string img = dir_.Write("img.idx", ImagesIdx());
  std::string lbl = dir_.Write("lbl.idx", IdxHeader(0x08, {2}) + std::string{1, 0});
  std::string e = ErrorOf([&] { ReadIdxDataset({{"image", img}, {"label", lbl}}); });
  EXPECT_NE(e.find("disagree on the number of samples"), std::string::npos) << e;
}

TEST_F(DatasetTest, BindFeedChecksTheVarShape) {
  Dataset d = ReadIdxDataset({{"image", dir_.Write("img.idx", ImagesIdx())}});
  const Column& c = d.Get("image");
  FeedBinding f = BindFeed("x", {-1, 4}, DType::kFloat32, c, std::nullopt, "run.yaml:5:7");
  EXPECT_DOUBLE_EQ(f.scale, 1.0 / 255.0);  // uint8 images land in [0, 1]
  EXPECT_DOUBLE_EQ(BindFeed("x", {-1, 2, 2}, DType::kFloat32, c, 2.0, "").scale, 2.0);
  std::string e = ErrorOf([&] { BindFeed("x", {-1, 784}, DType::kFloat32, c, std::nullopt, "run.yaml:5:7"); });
  EXPECT_NE(e.find("run.yaml:5:7: the dataset column 'image'"), std::string::npos) << e;
  EXPECT_NE(e.find("holds samples of shape [2, 2] (4 values), but feed var 'x' has shape [-1, 784] (784 values"),
            std::string::npos)
      << e;
  e = ErrorOf([&] { BindFeed("x", {-1, -1}, DType::kFloat32, c, std::nullopt, "w"); });
  EXPECT_NE(e.find("only its first (batch) dimension may be -1"), std::string::npos) << e;
}

TEST_F(DatasetTest, BatchesScaleImagesAndShapeLabels) {
  Dataset d =
      ReadIdxDataset({{"image", dir_.Write("img.idx", ImagesIdx())}, {"label", dir_.Write("lbl.idx", LabelsIdx())}});
  FeedBinding x = BindFeed("x", {-1, 4}, DType::kFloat32, d.Get("image"), std::nullopt, "");
  FeedBinding y = BindFeed("label", {-1, 1}, DType::kInt64, d.Get("label"), std::nullopt, "");
  std::vector<int64_t> order = {2, 0, 1};
  Tensor xb = MakeBatch(x, order, 0, 2, HostDevice());
  EXPECT_EQ(xb.GetShape(), (Shape{2, 4}));
  EXPECT_EQ(xb.GetDType(), DType::kFloat32);
  EXPECT_FLOAT_EQ(xb.Data<float>()[0], 160.0f / 255.0f);  // row 2 first
  EXPECT_FLOAT_EQ(xb.Data<float>()[4], 0.0f);
  EXPECT_FLOAT_EQ(xb.Data<float>()[7], 60.0f / 255.0f);
  // The last partial batch.
  Tensor yb = MakeBatch(y, order, 2, 3, HostDevice());
  EXPECT_EQ(yb.GetShape(), (Shape{1, 1}));
  EXPECT_EQ(yb.GetDType(), DType::kInt64);
  EXPECT_EQ(yb.Data<int64_t>()[0], 0);
  CheckLabelRange(y, 3, "");
  std::string e = ErrorOf([&] { CheckLabelRange(y, 2, "run.yaml:6:20"); });
  EXPECT_NE(e.find("run.yaml:6:20: label out of range in"), std::string::npos) << e;
  EXPECT_NE(e.find("(sample 0): expected an integer in [0, 2) for feed var 'label', but received 2"), std::string::npos)
      << e;
}

// Windows of seq_len + 1 bytes at stride seq_len, each file on its own,
// the tail of every file held out; inputs and labels one byte apart.
TEST_F(DatasetTest, TextWindowsAndHeldOutTails) {
  const std::string a = dir_.Write("a.txt", "abcdefghijklmnopqrstu");  // 21 bytes: 5 windows of 4 + 1
  const std::string b = dir_.Write("b.txt", "0123456789");             // 10 bytes: 2 windows
  dir_.Write("b.dat", "binary");
  std::vector<std::string> files = ExpandTextFiles({dir_.Path("*.txt"), dir_.Path("*")}, {"*.dat"});
  ASSERT_EQ(files, (std::vector<std::string>{a, b}));  // sorted, seen once, .dat excluded
  TextSplits s = ReadTextDataset(files, 4, 0.2);
  // a: 5 windows, round(1.0) = 1 held out; b: 2 windows, round(0.4) = 0, but at least 1.
  ASSERT_EQ(s.train.Size(), 5);
  ASSERT_EQ(s.eval.Size(), 2);
  const Column& in = s.train.Get("inputs");
  const Column& lb = s.train.Get("labels");
  EXPECT_EQ(in.sample_shape, (Shape{4}));
  auto row = [](const Column& c, int64_t r) {
    return std::string(reinterpret_cast<const char*>(c.bytes.data()) + r * 4, 4);
  };
  EXPECT_EQ(row(in, 0), "abcd");
  EXPECT_EQ(row(lb, 0), "bcde");
  EXPECT_EQ(row(in, 3), "mnop");
  EXPECT_EQ(row(lb, 3), "nopq");
  EXPECT_EQ(row(in, 4), "0123");
  EXPECT_EQ(row(s.eval.Get("inputs"), 0), "qrst");
  EXPECT_EQ(row(s.eval.Get("labels"), 0), "rstu");
  EXPECT_EQ(row(s.eval.Get("inputs"), 1), "4567");
  // Bytes go into token ids as they are (no 1/255 scale for int vars).
  FeedBinding f = BindFeed("tokens", {-1, 4}, DType::kInt64, in, std::nullopt, "");
  Tensor t = MakeBatch(f, {1}, 0, 1, HostDevice());
  EXPECT_EQ(t.Data<int64_t>()[0], 'e');
  EXPECT_EQ(ReadTextDataset(files, 4, 0).eval.Size(), 0);

  EXPECT_NE(ErrorOf([&] { ExpandTextFiles({dir_.Path("*.md")}, {}); }).find("*.md: no such file"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadTextDataset({b}, 20, 0); }).find("holds no training window of 21 bytes"),
            std::string::npos);
}

// What a glob may match that is not text: a folder reads as nothing and a
// named pipe blocks open(2) until a writer comes (a run hung on one). Both
// are errors naming the path, before anything is opened. A file whose name
// holds glob characters is itself; seq_len + 1 must not overflow.
TEST_F(DatasetTest, TextFilesAreRegularFilesAndLiteralNamesWork) {
  dir_.Write("a.txt", "abcdefghij");
  const std::string sub = dir_.Path("sub");
  std::filesystem::create_directory(sub);
  std::string msg = ErrorOf([&] { ExpandTextFiles({dir_.Path("*")}, {}); });
  EXPECT_NE(msg.find(sub + ": not a regular file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(matched by " + dir_.Path("*") + ")"), std::string::npos) << msg;
  std::filesystem::remove(sub);
  const std::string fifo = dir_.Path("pipe");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  msg = ErrorOf([&] { ExpandTextFiles({fifo}, {}); });
  EXPECT_NE(msg.find(fifo + ": not a regular file"), std::string::npos) << msg;
  std::filesystem::remove(fifo);
  const std::string literal = dir_.Write("b[1].txt", "0123456789");
  EXPECT_EQ(ExpandTextFiles({literal}, {}), std::vector<std::string>{literal});
  msg = ErrorOf([&] { ReadTextDataset({literal}, std::numeric_limits<int64_t>::max(), 0); });
  EXPECT_NE(msg.find("seq_len must lie in [1, 2^30]"), std::string::npos) << msg;
  msg = ErrorOf([&] { ReadTextDataset({literal}, 20, 0, "evaluation"); });
  EXPECT_NE(msg.find("holds no evaluation window of 21 bytes"), std::string::npos) << msg;
}

TEST_F(DatasetTest, NumBatchesKeepsOrDropsTheLastPartialBatch) {
  EXPECT_EQ(NumBatches(10, 4, false), 3);
  EXPECT_EQ(NumBatches(10, 4, true), 2);
  EXPECT_EQ(NumBatches(8, 4, false), 2);
  EXPECT_EQ(NumBatches(8, 4, true), 2);
  EXPECT_EQ(NumBatches(3, 4, true), 0);
}

TEST_F(DatasetTest, ShufflingIsSeededAndPerEpoch) {
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(EpochOrder(100, false, 5, 3), identity);
  std::vector<int64_t> a = EpochOrder(100, true, 5, 0);
  EXPECT_EQ(a, EpochOrder(100, true, 5, 0));  // reproducible
  EXPECT_NE(a, identity);
  EXPECT_NE(a, EpochOrder(100, true, 5, 1));  // a new order each epoch
  EXPECT_NE(a, EpochOrder(100, true, 6, 0));  // and each seed
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);  // a permutation
  // Pinned: the order must not change between builds or library versions,
  // or resumed runs would see different batches than the original run.
  EXPECT_EQ(EpochOrder(8, true, 42, 0), (std::vector<int64_t>{7, 2, 4, 5, 1, 0, 3, 6}));
}

TEST_F(DatasetTest, CsvColumnsByNameIndexAndRange) {
  std::string path = dir_.Write("d.csv", "label,a,b,c\n1,0.5,1.5,2.5\n0, 3 ,4,\"5\"\n\n2,6,7,8\n");
  Dataset d = ReadCsvDataset(path, {"label", "1:4", "2"}, true, ',');
  EXPECT_EQ(d.Size(), 3);
  const Column& feat = d.Get("1:4");
  EXPECT_EQ(feat.sample_shape, (Shape{3}));
  EXPECT_DOUBLE_EQ(feat.ValueAsDouble(3), 3.0);
  EXPECT_DOUBLE_EQ(feat.ValueAsDouble(5), 5.0);
  EXPECT_EQ(d.Get("label").sample_shape, Shape{});
  EXPECT_DOUBLE_EQ(d.Get("label").ValueAsDouble(2), 2.0);
  EXPECT_DOUBLE_EQ(d.Get("2").ValueAsDouble(1), 4.0);
  FeedBinding y = BindFeed("y", {-1, 1}, DType::kInt64, d.Get("label"), std::nullopt, "");
  EXPECT_EQ(MakeBatch(y, {0, 1, 2}, 0, 3, HostDevice()).Data<int64_t>()[2], 2);

  std::string e = ErrorOf([&] { ReadCsvDataset(path, {"labels"}, true, ','); });
  EXPECT_NE(e.find("no CSV column named 'labels'; the header has: label, a, b, c"), std::string::npos) << e;
  e = ErrorOf([&] { ReadCsvDataset(path, {"1:9"}, true, ','); });
  EXPECT_NE(e.find("runs past the last one; the file has 4 columns"), std::string::npos) << e;
  std::string bad = dir_.Write("bad.csv", "1;2\n3;x\n");
  e = ErrorOf([&] { ReadCsvDataset(bad, {"0:"}, false, ';'); });
  EXPECT_NE(e.find("bad.csv:2: CSV field 2 must be a number, but received 'x'"), std::string::npos) << e;
  std::string ragged = dir_.Write("ragged.csv", "1,2\n3\n");
  e = ErrorOf([&] { ReadCsvDataset(ragged, {"0"}, false, ','); });
  EXPECT_NE(e.find("ragged.csv:2: expected 2 CSV fields, but received 1"), std::string::npos) << e;
}

TEST_F(DatasetTest, NpyColumns) {
  Tensor x;
  float* px = x.Allocate<float>(HostDevice(), {3, 2});
  for (int i = 0; i < 6; ++i) px[i] = i * 0.5f;
  Tensor y;
  int64_t* py = y.Allocate<int64_t>(HostDevice(), {3});
  py[0] = 4, py[1] = 5, py[2] = 6;
  WriteNpy(dir_.Path("x.npy"), x);
  WriteNpy(dir_.Path("y.npy"), y);
  Dataset d = ReadNpyDataset({{"x", dir_.Path("x.npy")}, {"y", dir_.Path("y.npy")}});
  EXPECT_EQ(d.Size(), 3);
  EXPECT_EQ(d.Get("x").kind, ElemKind::kFloat32);
  EXPECT_EQ(d.Get("x").sample_shape, Shape{2});
  FeedBinding fx = BindFeed("x", {-1, 2}, DType::kFloat32, d.Get("x"), std::nullopt, "");
  EXPECT_DOUBLE_EQ(fx.scale, 1.0);  // float data is fed as it is
  Tensor b = MakeBatch(fx, {2, 1, 0}, 0, 2, HostDevice());
  EXPECT_FLOAT_EQ(b.Data<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(b.Data<float>()[3], 1.5f);
  FeedBinding fy = BindFeed("y", {-1, 1}, DType::kInt64, d.Get("y"), std::nullopt, "");
  EXPECT_EQ(MakeBatch(fy, {2, 1, 0}, 0, 3, HostDevice()).Data<int64_t>()[0], 6);
}

}  // namespace
}  // namespace nabla::train
