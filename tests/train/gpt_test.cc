// The GPT example end to end at a tiny scale: `nabla run` trains
// examples/gpt/gpt.yaml for a few steps on a text dataset, prints the
// held-out loss per epoch and writes checkpoints; `nabla generate` samples
// from them, the same text for the same seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "nabla/cpu/cpu.h"
#include "nabla/train/checkpoint.h"
#include "run_util.h"
#include "test_util.h"

namespace nabla::train {
namespace {

using testing::TempDir;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

// The held-out loss of the run's summary line ("eval loss        2.1234 ...").
double SummaryEvalLoss(const std::string& out) {
  const size_t at = out.rfind("eval loss");
  return at == std::string::npos ? -1.0 : std::strtod(out.c_str() + at + 9, nullptr);
}

class GptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 120; ++i) text += "the quick brown fox jumps over the lazy dog. ";
    dir_.Write("corpus.txt", text);
    WriteConfig("run.yaml", "");
  }
  void WriteConfig(const std::string& name, const std::string& extra) {
    dir_.Write(name, extra + "seed: 3\nprogram: " + NABLA_SOURCE_DIR + R"(/examples/gpt/gpt.yaml
loss: loss
optimizer: {type: adamw, lr: 0.01, weight_decay: 0.01, clip_global_norm: 1.0}
data:
  format: text
  seq_len: 128
  eval_fraction: 0.2
  samples_per_epoch: 16
  train: {files: "*.txt", feeds: {tokens: inputs, labels: labels}}
  batch_size: 4
epochs: 3
checkpoint: {dir: ckpt, keep_last: 1}
logging: {progress: lines}
)");
  }
  TempDir dir_;
};

// precision: bf16 (flash_attn and the GEMMs in bfloat16, softmax_lse and
// the master weights float32) trains to the float32 run's held-out loss.
TEST_F(GptTest, TrainsInBf16LikeFloat32) {
  WriteConfig("bf16.yaml", "precision: bf16\n");
  Result f = Nabla(dir_, "run run.yaml");
  ASSERT_EQ(f.rc, 0) << f.out << f.err;
  std::filesystem::remove_all(dir_.Path("ckpt"));  // a fresh run, not a resumed one
  Result b = Nabla(dir_, "run bf16.yaml");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  if (b.err.find("no bf16 instructions") != std::string::npos) GTEST_SKIP() << "this CPU has no bf16 instructions";
  EXPECT_NE(b.out.find("bf16 mixed precision"), std::string::npos) << b.out;
  const double lf = SummaryEvalLoss(f.out), lb = SummaryEvalLoss(b.out);
  ASSERT_GT(lf, 0.0) << f.out;
  EXPECT_NE(lb, lf);  // bfloat16 ran
  EXPECT_NEAR(lb, lf, 0.02 * lf) << "float32 " << lf << ", bf16 " << lb;
}

TEST_F(GptTest, TrainsAndGenerates) {
  Result r = Nabla(dir_, "run run.yaml");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("16 samples of 34, 4 batches of 4 per epoch, 8 eval samples"), std::string::npos) << r.out;
  EXPECT_EQ(Count(r.out, "eval loss"), 4u) << r.out;  // one per epoch and the summary's
  EXPECT_NE(r.out.find("epoch 3/3  train loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpoint       ckpt/ckpt-00000012.safetensors"), std::string::npos) << r.out;

  const std::string prompt = "the quick";
  Result a = Nabla(dir_, "generate run.yaml --checkpoint ckpt --prompt '" + prompt +
                             "' --tokens 24 --temperature 0.8 --top-k 5 --seed 7");
  ASSERT_EQ(a.rc, 0) << a.out << a.err;
  ASSERT_EQ(a.out.size(), prompt.size() + 24 + 1) << a.out;
  EXPECT_EQ(a.out.substr(0, prompt.size()), prompt);
  // A seed fixes the text; a file names the same checkpoint as its folder.
  Result b = Nabla(dir_, "generate run.yaml --checkpoint ckpt/ckpt-00000012.safetensors --prompt '" + prompt +
                             "' --tokens 24 --temperature 0.8 --top-k 5 --seed 7");
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(b.out, a.out);
  // top-k 1 is the most likely byte every time, as temperature 0 is.
  Result greedy =
      Nabla(dir_, "generate run.yaml --checkpoint ckpt --prompt '" + prompt + "' --tokens 24 --temperature 0");
  Result top1 =
      Nabla(dir_, "generate run.yaml --checkpoint ckpt --prompt '" + prompt + "' --tokens 24 --top-k 1 --seed 9");
  ASSERT_EQ(greedy.rc, 0) << greedy.err;
  EXPECT_EQ(top1.out, greedy.out);

  // A temperature so small that a score over it overflows is still greedy
  // (the draw once fell through to the k-th score: the least likely byte).
  Result tiny =
      Nabla(dir_, "generate run.yaml --checkpoint ckpt --prompt '" + prompt + "' --tokens 24 --temperature 1e-320");
  ASSERT_EQ(tiny.rc, 0) << tiny.err;
  EXPECT_EQ(tiny.out, greedy.out);

  Result bad = Nabla(dir_, "generate run.yaml --checkpoint nowhere --prompt x");
  EXPECT_EQ(bad.rc, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("nowhere"), std::string::npos) << bad.err;
  // A checkpoint of a bigger model (a parameter the program lacks) is
  // refused, not sampled from in part.
  cpu::InitCpuBackend();  // the host device the file's tensors land on
  SafetensorsFile ck = ReadSafetensors(dir_.Path("ckpt/ckpt-00000012.safetensors"));
  NamedTensors more(ck.tensors.begin(), ck.tensors.end());
  more.emplace_back("l9_fc_w", ck.tensors.begin()->second);
  ck.metadata.erase("data_crc32");
  WriteSafetensors(dir_.Path("bigger.safetensors"), more, ck.metadata);
  Result bigger = Nabla(dir_, "generate run.yaml --checkpoint bigger.safetensors --prompt x");
  EXPECT_EQ(bigger.rc, 2) << bigger.out << bigger.err;
  EXPECT_NE(bigger.err.find("holds tensor 'l9_fc_w', which the program does not have"), std::string::npos)
      << bigger.err;
}

// metrics.accuracy ranks [batch, classes] scores; a language model's are
// [batch, seq, vocab]: the error is at the config's key, not from the
// metric's own top_k and accuracy ops.
TEST_F(GptTest, AccuracyOfASequenceModelIsAConfigError) {
  WriteConfig("acc.yaml", "metrics: {accuracy: {label: labels}}\n");
  Result r = Nabla(dir_, "run acc.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("acc.yaml:1:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("metrics.accuracy ranks one score row per sample"), std::string::npos) << r.err;
}

// Text-split errors name the split's place in the config: a held-out
// fraction that holds nothing out (no file has two windows), a glob that
// matches a folder, and a seq_len whose window would overflow.
TEST_F(GptTest, TextSplitErrorsNameTheConfigPosition) {
  std::filesystem::create_directories(dir_.Path("short/sub"));
  dir_.Write("short/one.txt", std::string(200, 'a'));  // one window of 129 bytes
  auto config = [&](const std::string& files, const std::string& seq_len) {
    return "program: " + std::string(NABLA_SOURCE_DIR) + R"(/examples/gpt/gpt.yaml
loss: loss
data:
  format: text
  seq_len: )" +
           seq_len + R"(
  eval_fraction: 0.2
  train: {files: ")" +
           files + R"(", feeds: {tokens: inputs, labels: labels}}
  batch_size: 1
)";
  };
  dir_.Write("noeval.yaml", config("short/one.txt", "128"));
  Result r = Nabla(dir_, "run noeval.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("noeval.yaml:7:10: data.eval_fraction 0.2 holds out no window"), std::string::npos) << r.err;
  dir_.Write("folder.yaml", config("short/*", "128"));
  r = Nabla(dir_, "run folder.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("folder.yaml:7:10: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("short/sub: not a regular file"), std::string::npos) << r.err;
  dir_.Write("huge.yaml", config("short/one.txt", "9223372036854775807"));
  r = Nabla(dir_, "run huge.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("huge.yaml:5:12: data.seq_len must be at most 2^30"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nabla::train
