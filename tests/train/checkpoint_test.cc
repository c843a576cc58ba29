// Safetensors encoding, checkpoint rotation, and atomicity: a write killed
// at any moment never leaves a partial file where a checkpoint is expected.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "nabla/cpu/cpu.h"
#include "nabla/train/checkpoint.h"
#include "test_util.h"

namespace nabla::train {
namespace {

using testing::ErrorOf;
using testing::TempDir;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }
  TempDir dir_;
};

Tensor Floats(const Shape& shape, float start) {
  Tensor t;
  float* p = t.Allocate<float>(HostDevice(), shape);
  for (int64_t i = 0; i < t.Numel(); ++i) p[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

NamedTensors Sample() {
  Tensor steps;
  steps.Allocate<int64_t>(HostDevice(), {2})[0] = 7;
  steps.MutableData<int64_t>()[1] = -3;
  Tensor d;
  d.Allocate<double>(HostDevice(), {1})[0] = 0.125;
  return {{"w", Floats({3, 2}, 1.0f)}, {"b", Floats({3}, -1.0f)}, {"n", steps}, {"lr", d}};
}

TEST_F(CheckpointTest, RoundTrip) {
  std::string path = dir_.Path("a.safetensors");
  WriteSafetensors(path, Sample(), {{"step", "12"}, {"note", "hi"}});
  SafetensorsFile f = ReadSafetensors(path);
  EXPECT_EQ(f.metadata.at("step"), "12");
  EXPECT_EQ(f.metadata.at("note"), "hi");
  ASSERT_EQ(f.tensors.size(), 4u);
  const Tensor& w = f.tensors.at("w");
  EXPECT_EQ(w.GetShape(), (Shape{3, 2}));
  EXPECT_EQ(w.GetDType(), DType::kFloat32);
  EXPECT_FLOAT_EQ(w.Data<float>()[5], 2.25f);
  EXPECT_EQ(f.tensors.at("n").Data<int64_t>()[1], -3);
  EXPECT_DOUBLE_EQ(f.tensors.at("lr").Data<double>()[0], 0.125);

  // The header length is little-endian and the data starts 8-aligned.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 8 + n + (6 + 3) * 4 + 2 * 8 + 8);
}

TEST_F(CheckpointTest, MalformedFilesAreClearErrors) {
  std::string good = EncodeSafetensors(Sample(), {});
  std::string e = ErrorOf([&] { ReadSafetensors(dir_.Write("t.safetensors", good.substr(0, good.size() - 4))); });
  EXPECT_NE(e.find("t.safetensors: the file is truncated: its tensors need"), std::string::npos) << e;
  e = ErrorOf([&] { ReadSafetensors(dir_.Write("h.safetensors", good.substr(0, 20))); });
  EXPECT_NE(e.find("h.safetensors: the header length"), std::string::npos) << e;
  ErrorKind kind;
  e = ErrorOf([&] { ReadSafetensors(dir_.Path("none.safetensors")); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kNotFound);
}

// PyTorch users must be able to open our checkpoints. Debian's python3-torch
// 1.13 has no safetensors module, so the script reads the format the way
// the spec defines it (8-byte length, JSON header, raw data) into torch
// tensors, or uses the safetensors module when it is installed.
TEST_F(CheckpointTest, PyTorchReadsIt) {
  if (std::system(NABLA_SYSTEM_PYTHON " -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << NABLA_SYSTEM_PYTHON << " has no torch";
  }
  std::string path = SaveCheckpoint(dir_.Path("ckpt"), 40, 2, Sample(), {}, 0);
  std::string script = dir_.Write("read.py", R"(import json, struct, sys
import torch
path = sys.argv[1]
try:
    from safetensors.torch import load_file
    from safetensors import safe_open
    t = load_file(path)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
except ImportError:
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = bytearray(raw[8 + n:])
    t = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        x = torch.frombuffer(data[b:end], dtype=dtypes[e["dtype"]]) if end > b else torch.empty(0)
        t[name] = x.reshape(e["shape"])
assert meta["step"] == "40" and meta["epoch"] == "2", meta
w = t["w"]
assert w.dtype == torch.float32 and list(w.shape) == [3, 2], w
assert torch.equal(w, torch.arange(6, dtype=torch.float32).reshape(3, 2) * 0.25 + 1.0), w
assert t["n"].tolist() == [7, -3], t["n"]
assert t["lr"].dtype == torch.float64 and t["lr"].item() == 0.125
print("ok")
)");
  std::string cmd = std::string(NABLA_SYSTEM_PYTHON) + " " + script + " " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  std::string out;
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_EQ(out, "ok\n");
}

TEST_F(CheckpointTest, KeepsTheLastK) {
  std::string dir = dir_.Path("ckpt");
  for (int64_t step : {10, 20, 30, 40, 50}) SaveCheckpoint(dir, step, step / 10, Sample(), {}, 3);
  auto all = ListCheckpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].step, 30);
  EXPECT_EQ(all[2].step, 50);
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 50);
  EXPECT_EQ(latest->epoch, 5);
  EXPECT_EQ(latest->path, CheckpointPath(dir, 50));
  EXPECT_FALSE(LatestCheckpoint(dir_.Path("empty")).has_value());
}

// The temp file of an interrupted write is never taken for a checkpoint.
TEST_F(CheckpointTest, LeftoverTempFilesAreIgnored) {
  std::string dir = dir_.Path("ckpt");
  SaveCheckpoint(dir, 100, 1, Sample(), {}, 3);
  std::string partial = EncodeSafetensors(Sample(), {{"step", "200"}});
  dir_.Write("ckpt/ckpt-00000200.safetensors.tmp.4242.0", partial.substr(0, partial.size() / 2));
  dir_.Write("ckpt/notes.txt", "not a checkpoint");
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 100);
  EXPECT_EQ(ReadSafetensors(latest->path).tensors.size(), 4u);
}

// Kills a process that writes large checkpoints over and over at random
// moments; every checkpoint left behind must read back whole and intact.
TEST_F(CheckpointTest, KilledWriterLeavesOnlyCompleteCheckpoints) {
  std::string dir = dir_.Path("ckpt");
  SaveCheckpoint(dir, 1, 0, {{"w", Floats({1 << 20}, 1.0f)}}, {}, 2);
  for (int round = 0; round < 6; ++round) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t step = 2 + round * 1000;; ++step) {
        SaveCheckpoint(dir, step, 0, {{"w", Floats({1 << 20}, static_cast<float>(step))}}, {}, 2);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(15 + 23 * round));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    auto all = ListCheckpoints(dir);
    ASSERT_FALSE(all.empty());
    for (const auto& c : all) {
      SafetensorsFile f = ReadSafetensors(c.path);
      const Tensor& w = f.tensors.at("w");
      ASSERT_EQ(w.Numel(), 1 << 20) << c.path;
      const float start = c.step == 1 ? 1.0f : static_cast<float>(c.step);
      EXPECT_EQ(w.Data<float>()[0], start) << c.path;
      EXPECT_EQ(w.Data<float>()[(1 << 20) - 1], start + 0.25f * static_cast<float>((1 << 20) - 1)) << c.path;
      EXPECT_EQ(f.metadata.at("step"), std::to_string(c.step));
    }
  }
}

}  // namespace
}  // namespace nabla::train
