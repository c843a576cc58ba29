// The run config parser: defaults, every section, and errors that point at
// the exact file:line:col of the offending key or value.
#include <gtest/gtest.h>

#include <sstream>

#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/train/run_config.h"
#include "test_util.h"

namespace nabla::train {
namespace {

using testing::ErrorOf;

const char* kMinimal = R"(program: net.yaml
loss: loss
data:
  train:
    files: {image: img.idx, label: lbl.idx}
    feeds: {x: image, label: label}
)";

RunConfig Parse(const std::string& text) { return ParseRunConfig(text, "run.yaml", "/cfg"); }
std::string ParseError(const std::string& text) {
  return ErrorOf([&] { Parse(text); });
}

TEST(RunConfig, MinimalTakesDocumentedDefaults) {
  RunConfig c = Parse(kMinimal);
  EXPECT_EQ(c.program_path, "/cfg/net.yaml");
  EXPECT_EQ(c.loss, "loss");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.executor, "taskgraph");
  EXPECT_EQ(c.epochs, 0);  // unset: one epoch unless `steps` is given
  EXPECT_EQ(c.steps, 0);
  EXPECT_EQ(c.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_EQ(c.data.format, "idx");
  EXPECT_EQ(c.data.batch_size, 64);
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_FALSE(c.data.drop_last);
  EXPECT_FALSE(c.data.eval.present);
  EXPECT_EQ(c.data.train.files.at("image"), "/cfg/img.idx");
  ASSERT_EQ(c.data.train.feeds.size(), 2u);
  EXPECT_FALSE(c.accuracy.enabled);
  EXPECT_TRUE(c.checkpoint.dir.empty());
  EXPECT_EQ(c.logging.every_steps, 100);
  EXPECT_EQ(c.logging.progress, "auto");
}

TEST(RunConfig, FullConfig) {
  RunConfig c = Parse(R"(plugins: [extra/libmine.so]
device: cpu
executor: taskgraph
threads: 2
seed: 7
program: /abs/net.yaml
loss: loss
params: [w1, b1]
no_grad: [emb]
optimizer: {type: adam, lr: 0.001, beta1: 0.8, beta2: 0.99, epsilon: 1.0e-7, weight_decay: 0.0001,
            clip_global_norm: 5}
data:
  format: csv
  header: false
  delimiter: ";"
  train: {path: train.csv, feeds: {x: {column: "1:5", scale: 0.5}, label: 0}}
  eval: {path: test.csv, feeds: {x: "1:5", label: 0}}
  batch_size: 32
  eval_batch_size: 100
  shuffle: false
  seed: 3
  drop_last: true
epochs: 4
steps: 100
metrics: {accuracy: {logits: prob, label: label, k: 2}}
checkpoint: {dir: ckpt, every_steps: 50, every_epoch: false, keep_last: 2, resume: true}
logging: {every_steps: 10, metrics_file: out/m.jsonl, plot: true, progress: lines}
)");
  EXPECT_EQ(c.plugins, std::vector<std::string>{"/cfg/extra/libmine.so"});
  EXPECT_EQ(c.executor, "taskgraph");
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.program_path, "/abs/net.yaml");
  EXPECT_EQ(c.params, (std::vector<std::string>{"w1", "b1"}));
  EXPECT_EQ(c.no_grad, std::vector<std::string>{"emb"});
  EXPECT_EQ(c.optimizer.type, "adam");
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.epsilon, 1e-7);
  EXPECT_DOUBLE_EQ(c.optimizer.clip_global_norm, 5);
  EXPECT_EQ(c.data.format, "csv");
  EXPECT_FALSE(c.data.csv_header);
  EXPECT_EQ(c.data.csv_delimiter, ';');
  EXPECT_EQ(c.data.train.path, "/cfg/train.csv");
  ASSERT_EQ(c.data.train.feeds.size(), 2u);
  EXPECT_EQ(c.data.train.feeds[0].var, "x");
  EXPECT_EQ(c.data.train.feeds[0].column, "1:5");
  EXPECT_DOUBLE_EQ(*c.data.train.feeds[0].scale, 0.5);
  EXPECT_EQ(c.data.train.feeds[1].column, "0");
  EXPECT_FALSE(c.data.train.feeds[1].scale.has_value());
  EXPECT_TRUE(c.data.eval.present);
  EXPECT_EQ(c.data.eval_batch_size, 100);
  EXPECT_EQ(*c.data.seed, 3u);
  EXPECT_TRUE(c.data.drop_last);
  EXPECT_EQ(c.epochs, 4);
  EXPECT_EQ(c.steps, 100);
  EXPECT_TRUE(c.accuracy.enabled);
  EXPECT_EQ(c.accuracy.logits, "prob");
  EXPECT_EQ(c.accuracy.k, 2);
  EXPECT_EQ(c.checkpoint.dir, "ckpt");  // outputs stay relative to the working directory
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_TRUE(c.checkpoint.resume);
  EXPECT_EQ(c.logging.metrics_file, "out/m.jsonl");
  EXPECT_EQ(c.logging.plot, "out/m.png");
  EXPECT_EQ(c.logging.progress, "lines");
}

TEST(RunConfig, FeedOrderFollowsTheFile) {
  RunConfig c = Parse(kMinimal);
  EXPECT_EQ(c.data.train.feeds[0].var, "x");
  EXPECT_EQ(c.data.train.feeds[1].var, "label");
}

TEST(RunConfig, UnknownTopLevelKeyPointsAtTheKey) {
  std::string e = ParseError(std::string(kMinimal) + "epoch: 3\n");
  EXPECT_NE(e.find("run.yaml:7:1: unknown key 'epoch' in the run config; expected one of:"), std::string::npos) << e;
}

TEST(RunConfig, UnknownNestedKeyPointsAtTheKey) {
  std::string e = ParseError(std::string(kMinimal) + "optimizer:\n  type: sgd\n  lrr: 0.1\n");
  EXPECT_NE(e.find("run.yaml:9:3: unknown key 'lrr' in optimizer"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "checkpoint: {dir: c, every: 3}\n");
  EXPECT_NE(e.find("run.yaml:7:22: unknown key 'every' in checkpoint"), std::string::npos) << e;
}

// device: names any backend of the registry, with an index or without. The
// parser checks the form; whether the name is registered is known after the
// config's plugins load (a device plugin adds its backend), so
// OpenConfigDevice checks it, at the key, listing what this process
// registered.
TEST(RunConfig, DevicesComeFromTheRegistry) {
  EXPECT_EQ(Parse(std::string(kMinimal) + "device: null\n").device, "null");
  EXPECT_EQ(OpenConfigDevice(Parse(std::string(kMinimal) + "device: null\n")).Type(), NullDeviceType());
  EXPECT_EQ(Parse(std::string(kMinimal) + "device: cpu:0\n").device, "cpu:0");
  EXPECT_EQ(OpenConfigDevice(Parse(std::string(kMinimal) + "device: cpu:0\n")).Type(), DeviceType::kCPU);

  const RunConfig gpu = Parse(std::string(kMinimal) + "device: gpu\n");  // a plugin could still add it
  EXPECT_EQ(gpu.device, "gpu");
  std::string e = ErrorOf([&] { OpenConfigDevice(gpu); });
  EXPECT_NE(e.find("run.yaml:7:9: device must be a registered device, NAME or NAME:N with N an index ("),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("cpu"), std::string::npos) << e;
  EXPECT_NE(e.find("null"), std::string::npos) << e;
  EXPECT_NE(e.find("but received 'gpu'"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  // A backend's own refusal names the key too.
  e = ErrorOf([&] { OpenConfigDevice(Parse(std::string(kMinimal) + "device: null:3\n")); });
  EXPECT_EQ(e.rfind("run.yaml:7:9: device 'null:3': ", 0), 0u) << e;

  // A malformed spec is the parser's error.
  e = ParseError(std::string(kMinimal) + "device: 'cpu:x'\n");
  EXPECT_NE(e.find("run.yaml:7:9: device must be a registered device"), std::string::npos) << e;
  EXPECT_NE(e.find("but received 'cpu:x'"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "device: ':0'\n");
  EXPECT_NE(e.find("but received ':0'"), std::string::npos) << e;
}

// yaml-cpp keeps a repeated key and node[key] finds the first, so
// `epochs: 1` then `epochs: 3` trained one epoch without a word.
TEST(RunConfig, DuplicateKeysAreErrorsAtTheRepeat) {
  std::string e = ParseError(std::string(kMinimal) + "epochs: 1\nepochs: 3\n");
  EXPECT_NE(e.find("run.yaml:8:1: duplicate key 'epochs' (first at 7:1)"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "optimizer: {type: sgd, lr: 0.1, lr: 0.0001}\n");
  EXPECT_NE(e.find("run.yaml:7:33: duplicate key 'lr' (first at 7:24)"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "checkpoint: {dir: a, dir: b}\n");
  EXPECT_NE(e.find("run.yaml:7:22: duplicate key 'dir' (first at 7:14)"), std::string::npos) << e;
  // Nested in data, and the free-form maps: a split's files and feeds.
  e = ParseError(std::string(kMinimal) + "  batch_size: 5\n  batch_size: 23\n");
  EXPECT_NE(e.find("run.yaml:8:3: duplicate key 'batch_size' (first at 7:3)"), std::string::npos) << e;
  e = ParseError(R"(program: net.yaml
loss: loss
data:
  train:
    files: {image: img.idx, label: lbl.idx, image: b.idx}
    feeds: {x: image, label: label}
)");
  EXPECT_NE(e.find("run.yaml:5:45: duplicate key 'image' (first at 5:13)"), std::string::npos) << e;
  e = ParseError(R"(program: net.yaml
loss: loss
data:
  train:
    files: {image: img.idx, label: lbl.idx}
    feeds: {x: image, label: label, x: label}
)");
  EXPECT_NE(e.find("run.yaml:6:37: duplicate key 'x' (first at 6:13)"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// The executors are the core's and the host's, known at parse time: a
// misspelt one is an error at its key, not a positionless one later.
TEST(RunConfig, ExecutorIsARegisteredOne) {
  EXPECT_EQ(Parse(std::string(kMinimal) + "executor: sequential\n").executor, "sequential");
  std::string e = ParseError(std::string(kMinimal) + "executor: fast\n");
  EXPECT_NE(e.find("run.yaml:7:11: executor must be one of sequential, taskgraph, but received 'fast'"),
            std::string::npos)
      << e;
}

TEST(RunConfig, IllTypedValuesPointAtTheValue) {
  std::string e = ParseError(std::string(kMinimal) + "epochs: three\n");
  EXPECT_NE(e.find("run.yaml:7:9: epochs must be an integer, but received 'three'"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "epochs: 2.5\n");
  EXPECT_NE(e.find("run.yaml:7:9: epochs must be an integer, but received '2.5'"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "optimizer: {lr: fast}\n");
  EXPECT_NE(e.find("run.yaml:7:17: optimizer.lr must be a number, but received 'fast'"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "optimizer: {lr: -1}\n");
  EXPECT_NE(e.find("run.yaml:7:17: optimizer.lr must be > 0, but received -1"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "optimizer: {type: rmsprop}\n");
  EXPECT_NE(e.find("run.yaml:7:19: optimizer.type must be one of sgd, momentum, adam, adamw, but received 'rmsprop'"),
            std::string::npos)
      << e;
  e = ParseError(std::string(kMinimal) + "params: w\n");
  EXPECT_NE(e.find("run.yaml:7:9: params must be a list of strings, but received 'w'"), std::string::npos) << e;
  e = ParseError(R"(program: net.yaml
loss: loss
data:
  batch_size: [64]
  train:
    files: {image: img.idx}
    feeds: {x: image}
)");
  EXPECT_NE(e.find("run.yaml:4:15: data.batch_size must be an integer, but received a list"), std::string::npos) << e;
  e = ParseError(R"(program: net.yaml
loss: loss
data:
  shuffle: maybe
  train: {files: {image: img.idx}, feeds: {x: image}}
)");
  EXPECT_NE(e.find("run.yaml:4:12: data.shuffle must be true or false, but received 'maybe'"), std::string::npos) << e;
}

TEST(RunConfig, AdamWTakesAdamsKeysAndWeightDecay) {
  RunConfig c = Parse(std::string(kMinimal) + "optimizer: {type: adamw, lr: 0.002, beta2: 0.95, weight_decay: 0.1}\n");
  EXPECT_EQ(c.optimizer.type, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
}

TEST(RunConfig, OptionsOfAnotherOptimizerAreErrors) {
  std::string e = ParseError(std::string(kMinimal) + "optimizer: {type: adam, nesterov: true}\n");
  EXPECT_NE(e.find("run.yaml:7:35: optimizer.nesterov applies to type momentum, but the optimizer type is 'adam'"),
            std::string::npos)
      << e;
  e = ParseError(std::string(kMinimal) + "optimizer: {type: sgd, beta1: 0.8}\n");
  EXPECT_NE(e.find("run.yaml:7:31: optimizer.beta1 applies to type adam, adamw, but the optimizer type is 'sgd'"),
            std::string::npos)
      << e;
}

TEST(RunConfig, LearningRateSchedules) {
  RunConfig c = Parse(std::string(kMinimal) + "optimizer: {lr_schedule: cosine}\n");
  EXPECT_EQ(c.optimizer.schedule.type, "cosine");
  EXPECT_DOUBLE_EQ(c.optimizer.schedule.final_lr, 0.0);
  c = Parse(std::string(kMinimal) +
            "optimizer:\n  lr_schedule: {type: step, every_epochs: 3, gamma: 0.5, warmup_steps: 100}\n");
  EXPECT_EQ(c.optimizer.schedule.type, "step");
  EXPECT_EQ(c.optimizer.schedule.every_epochs, 3);
  EXPECT_DOUBLE_EQ(c.optimizer.schedule.gamma, 0.5);
  EXPECT_EQ(c.optimizer.schedule.warmup_steps, 100);
  EXPECT_EQ(Parse(kMinimal).optimizer.schedule.type, "constant");

  std::string e = ParseError(std::string(kMinimal) + "optimizer:\n  lr_schedule: {type: cosine, gamma: 0.5}\n");
  EXPECT_NE(e.find("run.yaml:8:38: optimizer.lr_schedule.gamma applies to type step, exponential, but the schedule "
                   "type is 'cosine'"),
            std::string::npos)
      << e;
  e = ParseError(std::string(kMinimal) + "optimizer:\n  lr_schedule: {type: step, gamma: 2}\n");
  EXPECT_NE(e.find("run.yaml:8:36: optimizer.lr_schedule.gamma must be in (0, 1], but received 2"), std::string::npos)
      << e;
  e = ParseError(std::string(kMinimal) + "optimizer:\n  lr_schedule: {every_epochs: 2}\n");
  EXPECT_NE(e.find("run.yaml:8:16: optimizer.lr_schedule needs the key 'type'"), std::string::npos) << e;
}

TEST(RunConfig, MissingKeysPointAtTheParentMapping) {
  std::string e = ParseError("program: net.yaml\ndata:\n  train: {files: {a: b}, feeds: {x: a}}\n");
  EXPECT_NE(e.find("run.yaml:1:1: the run config needs the key 'loss', but it is missing"), std::string::npos) << e;
  e = ParseError("program: net.yaml\nloss: l\ndata:\n  train:\n    files: {a: b}\n");
  EXPECT_NE(e.find("run.yaml:5:5: data.train needs the key 'feeds', but it is missing"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "checkpoint: {keep_last: 2}\n");
  EXPECT_NE(e.find("run.yaml:7:13: checkpoint needs the key 'dir'"), std::string::npos) << e;
}

TEST(RunConfig, FeedNamingAMissingColumn) {
  std::string e = ParseError(R"(program: net.yaml
loss: loss
data:
  train:
    files: {image: img.idx}
    feeds: {x: image, label: labels}
)");
  EXPECT_NE(e.find("run.yaml:6:30: data.train.feeds.label names the column 'labels', but data.train.files has no "
                   "such key"),
            std::string::npos)
      << e;
}

TEST(RunConfig, TextDatasets) {
  const std::string head = "program: net.yaml\nloss: loss\ndata:\n  format: text\n";
  RunConfig c = Parse(head + R"(  seq_len: 64
  eval_fraction: 0.1
  samples_per_epoch: 100
  train: {files: ["a/*.txt", /abs/b.txt], exclude: "*.md", feeds: {tok: inputs, lbl: labels}}
)");
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_DOUBLE_EQ(c.data.eval_fraction, 0.1);
  EXPECT_EQ(c.data.samples_per_epoch, 100);
  EXPECT_EQ(c.data.train.text_files, (std::vector<std::string>{"/cfg/a/*.txt", "/abs/b.txt"}));
  EXPECT_EQ(c.data.train.text_exclude, std::vector<std::string>{"*.md"});
  const std::string train = "  train: {files: a.txt, feeds: {tok: inputs}}\n";
  EXPECT_NE(ParseError(head + train).find("needs the key 'seq_len'"), std::string::npos);
  EXPECT_NE(ParseError(head + "  seq_len: 8\n  train: {files: a.txt, feeds: {tok: words}}\n")
                .find("names the column 'words', but a text dataset has the columns inputs, labels"),
            std::string::npos);
  EXPECT_NE(ParseError(head + "  seq_len: 8\n  eval_fraction: 1\n" + train).find("must be below 1"), std::string::npos);
  EXPECT_NE(ParseError(head + "  seq_len: 8\n  eval_fraction: 0.1\n" + train +
                       "  eval: {files: b.txt, feeds: {tok: inputs}}\n")
                .find("but data.eval is given too"),
            std::string::npos);
  EXPECT_NE(ParseError(std::string(kMinimal) + "  seq_len: 8\n").find("data.seq_len applies to format text"),
            std::string::npos);
}

TEST(RunConfig, YamlSyntaxErrorHasAPosition) {
  std::string e = ParseError("program: net.yaml\nloss: [loss\n");
  EXPECT_EQ(e.rfind("run.yaml:", 0), 0u) << e;
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
}

TEST(RunConfig, MetricsAndPlotChecks) {
  std::string e = ParseError(std::string(kMinimal) + "logging: {metrics_file: m.txt}\n");
  EXPECT_NE(e.find("run.yaml:7:25: logging.metrics_file must end in .csv or .jsonl"), std::string::npos) << e;
  e = ParseError(std::string(kMinimal) + "logging: {plot: true}\n");
  EXPECT_NE(e.find("run.yaml:7:17: logging.plot: true draws the metrics file"), std::string::npos) << e;
  RunConfig c =
      Parse(std::string(kMinimal) + "metrics: {accuracy: true}\nlogging: {metrics_file: m.csv, plot: c.svg}\n");
  EXPECT_TRUE(c.accuracy.enabled);
  EXPECT_EQ(c.logging.plot, "c.svg");
  c = Parse(std::string(kMinimal) + "metrics:\n  accuracy:\n");
  EXPECT_TRUE(c.accuracy.enabled);
}

// An inline program keeps the config's own line and column numbers, so
// errors the program loader reports point into the config file.
TEST(RunConfig, InlineProgramKeepsConfigPositions) {
  RunConfig c = Parse(R"(loss: loss
program:
  format: nabla-program/1
  blocks:
    - idx: 0
      parent: -1
      vars: {x: {shape: [-1, 4], dtype: float32}}
      ops: []
data:
  train:
    files: {image: img.idx}
    feeds: {x: image}
)");
  EXPECT_TRUE(c.program_path.empty());
  std::vector<std::string> lines;
  std::string line;
  std::istringstream is(c.program_text);
  while (std::getline(is, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 8u) << c.program_text;
  EXPECT_EQ(lines[0], "");
  EXPECT_EQ(lines[1], "");
  EXPECT_EQ(lines[2], "  format: nabla-program/1");
  EXPECT_EQ(lines[7], "      ops: []");

  c = Parse("loss: l\nprogram: {format: nabla-program/1, blocks: []}\ndata: {train: {files: {a: b}, feeds: {x: a}}}\n");
  EXPECT_EQ(c.program_text, "\n         {format: nabla-program/1, blocks: []}\n");
}

TEST(RunConfig, LoadRunConfigResolvesAgainstTheConfigFolder) {
  testing::TempDir dir;
  std::string path = dir.Write("run.yaml", kMinimal);
  RunConfig c = LoadRunConfig(path);
  EXPECT_EQ(c.program_path, dir.Path("net.yaml"));
  EXPECT_EQ(c.data.train.files.at("label"), dir.Path("lbl.idx"));
  ErrorKind kind;
  std::string e = ErrorOf([&] { LoadRunConfig(dir.Path("missing.yaml")); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kNotFound);
  EXPECT_NE(e.find("missing.yaml: cannot open the run config"), std::string::npos) << e;
}

}  // namespace
}  // namespace nabla::train
