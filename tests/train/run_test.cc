// `nabla run` end to end: a short training on a synthetic dataset must
// lower the loss; resuming from a checkpoint must land on exactly the same
// weights as an uninterrupted run; bad input and a NaN loss are one-line
// errors that keep the last good checkpoint.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "nabla/cpu/cpu.h"
#include "nabla/train/checkpoint.h"
#include "nabla/train/metrics.h"
#include "run_util.h"
#include "test_util.h"

namespace nabla::train {
namespace {

using testing::TempDir;

class RunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    dir_.Write("train.csv", BlobsCsv(150, 1));
    dir_.Write("eval.csv", BlobsCsv(60, 2));
  }
  TempDir dir_;
};

TEST_F(RunTest, TrainingLowersTheLossAndReports) {
  dir_.Write("run.yaml", Config("{type: momentum, lr: 0.1, momentum: 0.9}",
                                "epochs: 6\nlogging: {every_steps: 5, metrics_file: m.jsonl, progress: lines}\n"));
  Result r = Nabla(dir_, "run run.yaml");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("== summary =="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GEMM kernels     OpenBLAS " + cpu::BlasCoreName()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("precision        fp32\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("final eval accuracy: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1/6  step 5  batch 5/10"), std::string::npos) << r.out;  // plain lines off a TTY
  std::vector<MetricRow> rows = ReadMetrics(dir_.Path("m.jsonl"));
  std::vector<MetricRow> train, eval;
  for (const auto& row : rows) {
    if (row.phase == "train") train.push_back(row);
    if (row.phase == "eval") eval.push_back(row);
  }
  ASSERT_EQ(train.size(), 6u);
  ASSERT_EQ(eval.size(), 6u);
  EXPECT_EQ(train.back().step, 60);  // 10 batches (the last one partial) x 6 epochs
  EXPECT_LT(train.back().loss, 0.5 * train.front().loss);
  EXPECT_LT(eval.back().loss, eval.front().loss);
  ASSERT_TRUE(eval.back().accuracy.has_value());
  EXPECT_GE(*eval.back().accuracy, 0.9);
}

// The fed x is overwritten and needs a gradient, so the backward builder
// inserts a copy of it at the start of the forward part (docs/backward.md).
// Evaluation must still run the metric ops at its end: it read the last
// training batch's count instead (6 of 60 rows right, 10 %), as the RNN
// example's eval did.
TEST_F(RunTest, EvalKeepsItsMetricsWhenTheBackwardInsertsForwardOps) {
  auto config = [](int eval_batch_size) {
    std::string s = Config("{type: sgd, lr: 0.1}", "epochs: 3\nlogging: {metrics_file: m.jsonl}\n");
    auto replace = [&s](const std::string& from, const std::string& to) {
      ASSERT_NE(s.find(from), std::string::npos) << from;
      s.replace(s.find(from), from.size(), to);
    };
    replace("x: {shape: [-1, 4], dtype: float32, stop_gradient: true}", "x: {shape: [-1, 4], dtype: float32}");
    replace(
        "        - {type: mul,",
        "        - {type: scale, inputs: {X: [x]}, outputs: {Out: [x]}, attrs: {scale: 2.0}}\n        - {type: mul,");
    replace("  batch_size: 16\n", "  batch_size: 16\n  eval_batch_size: " + std::to_string(eval_batch_size) + "\n");
    return s;
  };
  // Eval batches of 60 (the whole set) and of 7: the accuracy may not depend on them.
  double accuracy[2] = {0, 0};
  const int eval_batch_sizes[2] = {60, 7};
  for (int i = 0; i < 2; ++i) {
    std::filesystem::remove(dir_.Path("m.jsonl"));
    dir_.Write("run.yaml", config(eval_batch_sizes[i]));
    Result r = Nabla(dir_, "run run.yaml");
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    std::vector<MetricRow> eval;
    for (const auto& row : ReadMetrics(dir_.Path("m.jsonl")))
      if (row.phase == "eval") eval.push_back(row);
    ASSERT_EQ(eval.size(), 3u);
    ASSERT_TRUE(eval.back().accuracy.has_value());
    accuracy[i] = *eval.back().accuracy;
  }
  EXPECT_GE(accuracy[0], 0.9);
  EXPECT_EQ(accuracy[0], accuracy[1]);
}

// 10 steps straight and 4 + 6 steps with a resume in between must give the
// same weights and optimizer state, bit for bit (adam's moments included).
TEST_F(RunTest, ResumeContinuesExactly) {
  const std::string ckpt = "checkpoint: {dir: ckpt, every_steps: 2, keep_last: 2}\n";
  dir_.Write("run.yaml", Config("{type: adam, lr: 0.01}", ckpt + "epochs: 3\n"));
  Result a = Nabla(dir_, "run run.yaml --steps 10");
  ASSERT_EQ(a.rc, 0) << a.out << a.err;
  auto straight = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 10));
  std::filesystem::remove_all(dir_.Path("ckpt"));

  Result b = Nabla(dir_, "run run.yaml --steps 4");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  EXPECT_EQ(ListCheckpoints(dir_.Path("ckpt")).back().step, 4);
  Result c = Nabla(dir_, "run run.yaml --steps 10 --resume");
  ASSERT_EQ(c.rc, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("resumed from ckpt/ckpt-00000004.safetensors (step 4, epoch 0, batch 4)"), std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("(6 this run)"), std::string::npos) << c.out;
  auto resumed = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 10));
  EXPECT_EQ(ListCheckpoints(dir_.Path("ckpt")).size(), 2u);  // keep_last

  ASSERT_EQ(straight.tensors.size(), resumed.tensors.size());
  EXPECT_TRUE(straight.tensors.count("w@moment1"));
  for (const auto& [name, t] : straight.tensors) {
    const Tensor& u = resumed.tensors.at(name);
    ASSERT_EQ(t.Bytes(), u.Bytes()) << name;
    EXPECT_EQ(std::memcmp(t.RawData(), u.RawData(), t.Bytes()), 0) << name << " differs after resume";
  }
  EXPECT_EQ(resumed.metadata.at("step"), "10");
  EXPECT_EQ(resumed.metadata.at("epoch"), "1");
  // Each plugin the program's ops come from, with its version and ops.
  // (The fusion pass made the layer's mul + add one fc.)
  EXPECT_TRUE(std::regex_search(resumed.metadata.at("plugins"), std::regex("math_ops [0-9.]+:( \\w+)* fc\\b")))
      << resumed.metadata.at("plugins");
  EXPECT_TRUE(std::regex_search(resumed.metadata.at("plugins"), std::regex("nn_ops [0-9.]+:( \\w+)* adam\\b")))
      << resumed.metadata.at("plugins");
}

void ExpectSameTensors(const SafetensorsFile& a, const SafetensorsFile& b, const std::string& what) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
  for (const auto& [name, t] : a.tensors) {
    const Tensor& u = b.tensors.at(name);
    ASSERT_EQ(t.Bytes(), u.Bytes()) << name;
    EXPECT_EQ(std::memcmp(t.RawData(), u.RawData(), t.Bytes()), 0) << name << " differs: " << what;
  }
}

// Dropout's mask (seed 0) follows the optimizer step, not the executor's
// count of runs, which the startup program, every evaluation batch and a
// resume moved: a resumed run trained other masks than the uninterrupted
// one, and eval_batch_size (documented to change only speed) changed the
// trained weights.
TEST_F(RunTest, DropoutMasksFollowTheStepAcrossResumeAndEvalBatches) {
  auto config = [](const std::string& eval_batch_size) {
    std::string s =
        Config("{type: sgd, lr: 0.2}", "epochs: 3\ncheckpoint: {dir: ckpt, every_steps: 2, keep_last: 0}\n");
    const std::string add = "        - {type: elementwise_add, inputs: {X: [xw], Y: [b]}";
    EXPECT_NE(s.find(add), std::string::npos);
    s.replace(s.find(add), add.size(),
              "        - {type: dropout, inputs: {X: [xw]}, outputs: {Out: [xwd], Mask: [mask]}, "
              "attrs: {dropout_prob: 0.5}}\n"
              "        - {type: elementwise_add, inputs: {X: [xwd], Y: [b]}");
    if (!eval_batch_size.empty())
      s.replace(s.find("  batch_size: 16\n"), 16, "  batch_size: 16\n  eval_batch_size: " + eval_batch_size);
    return s;
  };
  // 14 steps: past the first epoch's 10, so 4 evaluation batches run between
  // step 10 and step 11.
  dir_.Write("run.yaml", config(""));
  Result a = Nabla(dir_, "run run.yaml --steps 14");
  ASSERT_EQ(a.rc, 0) << a.out << a.err;
  auto straight = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 14));
  std::filesystem::remove_all(dir_.Path("ckpt"));

  Result b = Nabla(dir_, "run run.yaml --steps 4");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  Result c = Nabla(dir_, "run run.yaml --steps 14 --resume");
  ASSERT_EQ(c.rc, 0) << c.out << c.err;
  ExpectSameTensors(straight, ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 14)), "resumed at step 4");
  std::filesystem::remove_all(dir_.Path("ckpt"));

  dir_.Write("run.yaml", config("7"));
  Result d = Nabla(dir_, "run run.yaml --steps 14");
  ASSERT_EQ(d.rc, 0) << d.out << d.err;
  ExpectSameTensors(straight, ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 14)), "eval_batch_size 7");
}

// A run resumed mid-epoch (and mid-interval of the `step` rows) reports
// what the uninterrupted run does: its epoch's `train` row, the summary and
// the next `step` row averaged only the batches run after the resume.
TEST_F(RunTest, MetricsOfAResumedEpochCoverTheWholeEpoch) {
  const std::string extra =
      "epochs: 2\ncheckpoint: {dir: ckpt, every_steps: 1, keep_last: 0}\n"
      "logging: {every_steps: 3, metrics_file: m.csv, progress: none}\n";
  dir_.Write("run.yaml", Config("{type: sgd, lr: 0.5}", extra));
  Result a = Nabla(dir_, "run run.yaml");
  ASSERT_EQ(a.rc, 0) << a.out << a.err;
  // The step and train rows (the stopped run adds an eval row at step 7).
  auto training_rows = [this] {
    std::vector<MetricRow> rows;
    for (const MetricRow& r : ReadMetrics(dir_.Path("m.csv")))
      if (r.phase != "eval") rows.push_back(r);
    return rows;
  };
  const std::vector<MetricRow> straight = training_rows();
  std::filesystem::remove_all(dir_.Path("ckpt"));
  std::filesystem::remove(dir_.Path("m.csv"));

  // Stopped at step 7 of the first epoch's 10, between step rows 6 and 9.
  Result b = Nabla(dir_, "run run.yaml --steps 7");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  Result c = Nabla(dir_, "run run.yaml --resume");
  ASSERT_EQ(c.rc, 0) << c.out << c.err;
  EXPECT_EQ(c.err, "");
  const std::vector<MetricRow> resumed = training_rows();
  ASSERT_EQ(straight.size(), 8u);  // steps 3, 6, ..., 18 and two epochs
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    SCOPED_TRACE(straight[i].phase + " row at step " + std::to_string(straight[i].step));
    EXPECT_EQ(straight[i].phase, resumed[i].phase);
    EXPECT_EQ(straight[i].step, resumed[i].step);
    EXPECT_EQ(straight[i].loss, resumed[i].loss);
    EXPECT_EQ(straight[i].accuracy, resumed[i].accuracy);
  }
  auto line = [](const std::string& out, const std::string& start) {
    const size_t at = out.find("\n" + start);
    return at == std::string::npos ? std::string() : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line(a.out, "train loss"), "");
  EXPECT_EQ(line(a.out, "train loss"), line(c.out, "train loss"));

  // A checkpoint from before the sums were recorded still resumes; the
  // epoch's numbers then cover the batches after it, and a warning says so.
  std::filesystem::remove_all(dir_.Path("ckpt"));
  std::filesystem::remove(dir_.Path("m.csv"));
  ASSERT_EQ(Nabla(dir_, "run run.yaml --steps 7").rc, 0);
  const std::string at7 = CheckpointPath(dir_.Path("ckpt"), 7);
  SafetensorsFile old = ReadSafetensors(at7);
  for (const char* key :
       {"epoch_loss_sum", "epoch_samples", "epoch_correct", "window_loss_sum", "window_samples", "window_correct"})
    EXPECT_EQ(old.metadata.erase(key), 1u) << key;
  NamedTensors tensors(old.tensors.begin(), old.tensors.end());
  WriteSafetensors(at7, tensors, old.metadata);
  Result d = Nabla(dir_, "run run.yaml --resume");
  ASSERT_EQ(d.rc, 0) << d.out << d.err;
  EXPECT_NE(d.err.find("warning: ckpt/ckpt-00000007.safetensors predates the metric sums in checkpoints: epoch 1's "
                       "train loss and accuracy cover only the batches run after this resume"),
            std::string::npos)
      << d.err;
}

double SquaredNorm(const SafetensorsFile& f, const std::vector<std::string>& names,
                   const SafetensorsFile* minus = nullptr) {
  double s = 0;
  for (const auto& n : names) {
    const Tensor& t = f.tensors.at(n);
    for (int64_t i = 0; i < t.Numel(); ++i) {
      double v = t.Data<float>()[i] - (minus ? minus->tensors.at(n).Data<float>()[i] : 0.0f);
      s += v * v;
    }
  }
  return s;
}

// With plain SGD at lr 1, one step moves the parameters by exactly the
// clipped gradient, whose global norm is the clip (the raw one is larger).
TEST_F(RunTest, GlobalNormClippingBoundsTheStep) {
  dir_.Write("run.yaml", Config("{type: sgd, lr: 1.0, clip_global_norm: 0.01}",
                                "checkpoint: {dir: ckpt, every_steps: 1, keep_last: 0}\n"));
  Result r = Nabla(dir_, "run run.yaml --steps 3");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s1 = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 1));
  auto s2 = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 2));
  EXPECT_NEAR(std::sqrt(SquaredNorm(s2, {"w", "b"}, &s1)), 0.01, 1e-5);
}

TEST_F(RunTest, WeightDecayShrinksTheWeights) {
  const std::string ckpt = "checkpoint: {dir: ckpt, keep_last: 0}\n";
  dir_.Write("run.yaml", Config("{type: momentum, lr: 0.1, nesterov: true}", ckpt));
  ASSERT_EQ(Nabla(dir_, "run run.yaml --steps 20").rc, 0);
  auto plain = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 20));
  std::filesystem::remove_all(dir_.Path("ckpt"));
  dir_.Write("run.yaml", Config("{type: momentum, lr: 0.1, nesterov: true, weight_decay: 0.5}", ckpt));
  Result r = Nabla(dir_, "run run.yaml --steps 20");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto decayed = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 20));
  EXPECT_LT(SquaredNorm(decayed, {"w"}), 0.8 * SquaredNorm(plain, {"w"}));
  EXPECT_TRUE(decayed.tensors.count("w@velocity"));
}

TEST_F(RunTest, StepScheduleHalvesTheRateEachEpoch) {
  dir_.Write("run.yaml", Config("{type: sgd, lr: 0.2, lr_schedule: {type: step, gamma: 0.5}}", "epochs: 3\n"));
  Result r = Nabla(dir_, "run run.yaml --progress none");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  dir_.Write("run.yaml", Config("{type: sgd, lr: 0.2, lr_schedule: {type: step, gamma: 0.5}}",
                                "epochs: 3\nlogging: {progress: lines, every_steps: 1000}\n"));
  r = Nabla(dir_, "run run.yaml");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("  lr 0.2  ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  lr 0.1  ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  lr 0.05  ("), std::string::npos) << r.out;
  dir_.Write("run.yaml", Config("{type: sgd, lr_schedule: cosine}", "epochs: 1\n"));
  r = Nabla(dir_, "run run.yaml --steps 5");  // --steps alone lifts the epoch bound; 5 steps bound the cosine
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
}

TEST_F(RunTest, NanLossStopsAndKeepsTheLastGoodCheckpoint) {
  dir_.Write("train.csv", BlobsCsv(150, 1, /*nan_row=*/100));
  // No shuffling, so row 100 lands in batch 7 (rows 96..111).
  std::string cfg = Config("{type: sgd, lr: 0.1}", "checkpoint: {dir: ckpt, every_steps: 3}\n");
  cfg.replace(cfg.find("  batch_size: 16"), 16, "  batch_size: 16\n  shuffle: false");
  dir_.Write("run.yaml", cfg);
  Result r = Nabla(dir_, "run run.yaml");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("nabla: error: the loss 'loss' is NaN at step 7 (epoch 1, batch 7 of 10)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the last good checkpoint is ckpt/ckpt-00000006.safetensors"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  auto all = ListCheckpoints(dir_.Path("ckpt"));
  ASSERT_EQ(all.back().step, 6);
  for (const auto& [name, t] : ReadSafetensors(all.back().path).tensors) {
    if (t.GetDType() != DType::kFloat32) continue;
    for (int64_t i = 0; i < t.Numel(); ++i) ASSERT_TRUE(std::isfinite(t.Data<float>()[i])) << name;
  }
}

// device: null (the registry's dry-run device) checks a config's shapes
// through startup, one step and one eval batch, and writes nothing; an
// unregistered device is refused at its line.
TEST_F(RunTest, TheNullDeviceIsADryRunThatWritesNothing) {
  dir_.Write("run.yaml", Config("{type: sgd, lr: 0.1}",
                                "device: null\ncheckpoint: {dir: ckpt}\n"
                                "logging: {metrics_file: m.csv}\n"));
  Result r = Nabla(dir_, "run run.yaml");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("dry run on the null device: the startup program, one training step of 16 rows and one "
                       "evaluation batch ran shape inference through every op"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir_.Path("ckpt")));
  EXPECT_FALSE(std::filesystem::exists(dir_.Path("m.csv")));
  dir_.Write("run.yaml", Config("{type: sgd, lr: 0.1}", "device: tpu:1\n"));
  r = Nabla(dir_, "run run.yaml");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("run.yaml:28:9: device must be a registered device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("but received 'tpu:1'"), std::string::npos) << r.err;
}

// Device plugins loaded through the C ABI, named by the config's own
// `plugins:`: they load before `device:` is resolved, so the device may be
// one they add. toy_cdev (a device written in C whose ops run their CPU
// kernels on host copies) trains the linear classifier, checkpoints and
// resumes, bit for bit what the CPU gives.
TEST_F(RunTest, ADevicePluginOfTheConfigTrainsCheckpointsAndResumes) {
  const std::string plugin = std::string("plugins: ['") + TOY_CDEV + "']\n";
  // toy_cdev counts its memory without a lock: one thread.
  const std::string common = "executor: sequential\nthreads: 1\nepochs: 3\n";
  const std::string ckpt = "checkpoint: {dir: ckpt, every_steps: 2, keep_last: 0}\n";
  dir_.Write("run.yaml", plugin + Config("{type: adam, lr: 0.01}", "device: cpu\n" + common + ckpt));
  Result r = Nabla(dir_, "run run.yaml --steps 6");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto on_cpu = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 6));
  std::filesystem::remove_all(dir_.Path("ckpt"));

  dir_.Write("run.yaml", plugin + Config("{type: adam, lr: 0.01}", "device: toy_cdev\n" + common + ckpt));
  r = Nabla(dir_, "run run.yaml --steps 2");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("op 'mul' has no toy_cdev kernel for float32; running its cpu kernel on host copies"),
            std::string::npos)
      << r.err;
  r = Nabla(dir_, "run run.yaml --steps 6 --resume");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resumed from ckpt/ckpt-00000002.safetensors (step 2"), std::string::npos) << r.out;
  auto resumed = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 6));
  ASSERT_EQ(on_cpu.tensors.size(), resumed.tensors.size());
  EXPECT_TRUE(resumed.tensors.count("w@moment1"));
  for (const auto& [name, t] : on_cpu.tensors) {
    const Tensor& u = resumed.tensors.at(name);
    ASSERT_EQ(t.Bytes(), u.Bytes()) << name;
    EXPECT_EQ(std::memcmp(t.RawData(), u.RawData(), t.Bytes()), 0) << name << " differs from the cpu run";
  }

  // The device plugin given as --plugin instead, before the config: each
  // --plugin takes one file, so the config stays the command's.
  std::filesystem::remove_all(dir_.Path("ckpt"));
  dir_.Write("run.yaml", Config("{type: adam, lr: 0.01}", "device: toy_cdev\n" + common + ckpt));
  r = Nabla(dir_, std::string("run --plugin '") + TOY_CDEV + "' run.yaml --steps 6");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto straight = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 6));
  for (const auto& [name, t] : on_cpu.tensors)
    EXPECT_EQ(std::memcmp(t.RawData(), straight.tensors.at(name).RawData(), t.Bytes()), 0) << name;

  // An unknown device still names the key and lists what the plugins added.
  dir_.Write("run.yaml", plugin + Config("{type: sgd, lr: 0.1}", "device: toy_cdv\n"));
  r = Nabla(dir_, "run run.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("nabla: error: run.yaml:29:9: device must be a registered device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("toy_cdev), but received 'toy_cdv'"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // So does a device the backend does not have.
  dir_.Write("run.yaml", plugin + Config("{type: sgd, lr: 0.1}", "device: toy_cdev:1\n"));
  r = Nabla(dir_, "run run.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(
      r.err.find("nabla: error: run.yaml:29:9: device 'toy_cdev:1': no device toy_cdev:1: toy_cdev has one device, "
                 "toy_cdev:0"),
      std::string::npos)
      << r.err;
}

// The skeleton device frozen at C ABI version 2 (tests/plugins/abi_v2), named
// by `device:` and loaded by `plugins:`, is opened and runs what it has
// kernels for (fill_constant for the startup program and the loss's
// gradient, elementwise_add, relu). It runs no CPU kernels on host copies,
// so training stops at the first op it lacks, relu_grad: one line, exit 2,
// no checkpoint.
TEST_F(RunTest, TheFrozenSkeletonDeviceOfTheConfigRunsUpToAnOpItLacks) {
  dir_.Write("x.csv", "x\n1\n-2\n");
  dir_.Write("run.yaml", std::string("plugins: ['") + ABI_V2_PLUGIN + R"(']
device: skeleton
program:
  format: nabla-program/1
  blocks:
    - idx: 0
      parent: -1
      vars:
        x: {shape: [1, 1], dtype: float32}
        b: {shape: [1, 1], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}
      ops:
        - {type: elementwise_add, inputs: {X: [x], Y: [b]}, outputs: {Out: [h]}}
        - {type: relu, inputs: {X: [h]}, outputs: {Out: [loss]}}
loss: loss
optimizer: {type: sgd, lr: 0.1}
data:
  format: csv
  train: {path: x.csv, feeds: {x: x}}
  batch_size: 1
checkpoint: {dir: ckpt}
)");
  Result r = Nabla(dir_, "run run.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("training run.yaml: 2 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("op 'relu_grad': no kernel for (skeleton, float32)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(device skeleton:0 runs no cpu kernels on host copies)"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(ListCheckpoints(dir_.Path("ckpt")).empty());
}

TEST_F(RunTest, BadInputIsAOneLineErrorWithExitCode2) {
  struct Case {
    std::string config, expected;
  };
  std::string good = Config("{type: sgd, lr: 0.1}");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::vector<Case> cases = {
      // Data and program files name their key in the config too.
      {with("train.csv", "missing.csv"), "run.yaml:24:17: missing.csv: cannot open the dataset file"},
      {with("  format: csv\n  train: {path: train.csv, feeds: {x: \"1:5\", label: label}}\n"
            "  eval: {path: eval.csv, feeds: {x: \"1:5\", label: label}}\n",
            "  format: npy\n  train: {files: {label: missing.npy, x: x.npy}, feeds: {x: x, label: label}}\n"),
       "run.yaml:24:26: missing.npy: cannot open .npy file"},
      {with(kProgram, "program: nope.yaml\n"), "run.yaml:3:10: program file 'nope.yaml' does not exist"},
      {with("loss: loss", "loss: loss\nexecutor: fast"),
       "run.yaml:3:11: executor must be one of sequential, taskgraph, but received 'fast'"},
      {with("batch_size: 16", "batch_size: 16\nepochs: 1\nepochs: 3"),
       "run.yaml:28:1: duplicate key 'epochs' (first at 27:1)"},
      {with("x: \"1:5\", label: label}}\n  eval", "x: \"1:4\", label: label}}\n  eval"),
       "run.yaml:24:36: the dataset column '1:4'"},
      {with("batch_size: 16", "batch_size: 16\nepochz: 3"), "run.yaml:27:1: unknown key 'epochz' in the run config"},
      {with("loss: loss", "loss: lost"), "run.yaml:2:7: loss 'lost' is not a var of the program's root block"},
      // A misspelt name would train what was meant to stay fixed.
      {with("loss: loss", "loss: loss\nno_grad: [x, bb]"), "run.yaml:3:10: no_grad names 'bb', which is not a var"},
      {with("loss: loss", "loss: loss\nparams: [ww]"), "run.yaml:3:9: params names 'ww', which is not a var"},
      {with("loss: loss", "loss: loss\nparams: [w, xw]"), "run.yaml:3:9: params names 'xw', which is not persistable"},
  };
  for (const auto& c : cases) {
    dir_.Write("run.yaml", c.config);
    Result r = Nabla(dir_, "run run.yaml");
    EXPECT_EQ(r.rc, 2) << c.expected << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("nabla: error: " + c.expected), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }

  // 0 is refused as negative values are: --epochs 0 trained the config's
  // epochs, as if the flag were not there.
  dir_.Write("run.yaml", good);
  for (const std::string flag : {"--epochs", "--steps"}) {
    for (const std::string value : {"0", "-2"}) {
      Result r = Nabla(dir_, "run run.yaml " + flag + " " + value);
      EXPECT_EQ(r.rc, 2) << flag << " " << value << "\n" << r.out << r.err;
      EXPECT_NE(r.err.find("nabla: error: " + flag + " must be >= 1, but received " + value), std::string::npos)
          << r.err;
      EXPECT_EQ(r.out, "") << flag << " " << value;
    }
  }

  // A label the logits cannot index: 3 classes, label 7.
  std::string csv = BlobsCsv(150, 1);
  csv.replace(csv.find("\n1,") + 1, 1, "7");
  dir_.Write("train.csv", csv);
  dir_.Write("run.yaml", good);
  Result r = Nabla(dir_, "run run.yaml");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("label out of range in"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(sample 1): expected an integer in [0, 3) for feed var 'label', but received 7"),
            std::string::npos)
      << r.err;
}

TEST_F(RunTest, PlotDrawsTheMetrics) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  dir_.Write("run.yaml", Config("{type: sgd, lr: 0.1}", "epochs: 2\nlogging: {metrics_file: m.csv, plot: p.svg}\n"));
  Result r = Nabla(dir_, "run run.yaml");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(Slurp(dir_.Path("p.svg")).find("<svg"), std::string::npos);
  r = Nabla(dir_, "plot m.csv -o again.txt");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(Slurp(dir_.Path("again.txt")).find("loss"), std::string::npos);
}

}  // namespace
}  // namespace nabla::train
