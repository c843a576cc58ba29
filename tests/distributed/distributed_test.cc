// Data-parallel `nabla run` under `mpirun -np 2` on localhost against one
// process with the same global batch and seed: the final parameters agree
// within float rounding (an MLP, and an RNN whose time steps are a while
// loop), only rank 0 reports and writes, a stalled peer ends the run with
// one line naming the rank and the op (exit 1, checkpoints intact), and a
// config that asks for ranks without mpirun is an exit-2 error.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "nabla/cpu/cpu.h"
#include "nabla/train/checkpoint.h"
#include "train/test_util.h"

namespace nabla::train {
namespace {

using testing::TempDir;

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result Shell(const TempDir& dir, const std::string& cmd) {
  std::string full = "cd '" + dir.Dir().string() + "' && " + cmd + " >stdout.txt 2>stderr.txt";
  int status = std::system(full.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(dir.Path("stdout.txt"));
  r.err = Slurp(dir.Path("stderr.txt"));
  return r;
}

const std::string kNabla = NABLA_BIN_PATH;
// Ranks on a machine that may have fewer cores, as root in CI; shared
// memory between the ranks, no binding (ranks share the cores).
std::string Mpirun(int ranks) {
  return std::string(NABLA_MPIEXEC) + " --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np " +
         std::to_string(ranks) + " ";
}
const std::string kMpirun = Mpirun(2);

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Three classes in 6 features, from a fixed LCG.
std::string ClassesCsv(int rows, uint32_t seed) {
  std::ostringstream s;
  s << "label,f0,f1,f2,f3,f4,f5\n";
  uint32_t state = seed;
  auto noise = [&] {
    state = state * 1664525u + 1013904223u;
    return (static_cast<double>(state >> 8) / (1 << 24) - 0.5) * 1.5;
  };
  const double centers[3][6] = {{1, 0, 0, 1, 0, 1}, {0, 1, 1, 0, 1, 0}, {-1, -1, 0, 0, -1, 0}};
  for (int i = 0; i < rows; ++i) {
    const int c = (i * 7 + i / 5) % 3;
    s << c;
    for (int j = 0; j < 6; ++j) s << "," << centers[c][j] + noise();
    s << "\n";
  }
  return s.str();
}

// Two layers with a relu: several gradients, buckets and fused ops.
const char* kMlp = R"(program:
  format: nabla-program/1
  blocks:
    - idx: 0
      parent: -1
      vars:
        x: {shape: [-1, 6], dtype: float32, stop_gradient: true}
        label: {shape: [-1, 1], dtype: int64}
        w1: {shape: [6, 8], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.5, max: 0.5, seed: 3}}
        b1: {shape: [8], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
        w2: {shape: [8, 3], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.5, max: 0.5, seed: 4}}
        b2: {shape: [3], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
      ops:
        - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [xw]}}
        - {type: elementwise_add, inputs: {X: [xw], Y: [b1]}, outputs: {Out: [a]}, attrs: {axis: 1}}
        - {type: relu, inputs: {X: [a]}, outputs: {Out: [h]}}
        - {type: mul, inputs: {X: [h], Y: [w2]}, outputs: {Out: [hw]}}
        - {type: elementwise_add, inputs: {X: [hw], Y: [b2]}, outputs: {Out: [logits]}, attrs: {axis: 1}}
        - {type: softmax_with_cross_entropy, inputs: {Logits: [logits], Label: [label]}, outputs: {Softmax: [prob], Loss: [ce]}}
        - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
data:
  format: csv
  train: {path: train.csv, feeds: {x: "1:7", label: label}}
  eval: {path: eval.csv, feeds: {x: "1:7", label: label}}
)";

// An RNN over three time steps: the steps are a while loop whose gradient
// (while_grad) writes the gradients of w and b.
const char* kRnn = R"(program:
  format: nabla-program/1
  blocks:
    - idx: 0
      parent: -1
      vars:
        x0: {shape: [-1, 2], dtype: float32, stop_gradient: true}
        x1: {shape: [-1, 2], dtype: float32, stop_gradient: true}
        x2: {shape: [-1, 2], dtype: float32, stop_gradient: true}
        label: {shape: [-1, 1], dtype: int64}
        xs: {shape: [-1, 2], dtype: float32, type: tensor_array, stop_gradient: true}
        u: {shape: [2, 5], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.5, max: 0.5, seed: 7}}
        w: {shape: [7, 5], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.5, max: 0.5, seed: 8}}
        b: {shape: [5], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
        v: {shape: [5, 3], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.5, max: 0.5, seed: 9}}
        steps: {type: step_scopes}
      ops:
        - {type: fill_constant, outputs: {Out: [at0]}, attrs: {shape: [1], dtype: int64, value: 0.0}}
        - {type: write_to_array, inputs: {X: [x0], I: [at0]}, outputs: {Out: [xs]}}
        - {type: fill_constant, outputs: {Out: [at1]}, attrs: {shape: [1], dtype: int64, value: 1.0}}
        - {type: write_to_array, inputs: {X: [x1], I: [at1]}, outputs: {Out: [xs]}}
        - {type: fill_constant, outputs: {Out: [at2]}, attrs: {shape: [1], dtype: int64, value: 2.0}}
        - {type: write_to_array, inputs: {X: [x2], I: [at2]}, outputs: {Out: [xs]}}
        - {type: mul, inputs: {X: [x0], Y: [u]}, outputs: {Out: [h]}}
        - {type: fill_constant, outputs: {Out: [i]}, attrs: {shape: [1], dtype: int64, value: 0.0}}
        - {type: fill_constant, outputs: {Out: [n]}, attrs: {shape: [1], dtype: int64, value: 3.0}}
        - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [more]}}
        - type: while
          inputs: {X: [xs, i, n, h, w, b], Condition: [more]}
          outputs: {Out: [h, i, more], StepScopes: [steps]}
          attrs: {sub_block: 1}
        - {type: mul, inputs: {X: [h], Y: [v]}, outputs: {Out: [logits]}}
        - {type: softmax_with_cross_entropy, inputs: {Logits: [logits], Label: [label]}, outputs: {Softmax: [prob], Loss: [ce]}}
        - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
    - idx: 1
      parent: 0
      ops:
        - {type: read_from_array, inputs: {X: [xs], I: [i]}, outputs: {Out: [x]}}
        - {type: concat, inputs: {X: [x, h]}, outputs: {Out: [xh]}, attrs: {axis: 1}}
        - {type: mul, inputs: {X: [xh], Y: [w]}, outputs: {Out: [z]}}
        - {type: elementwise_add, inputs: {X: [z], Y: [b]}, outputs: {Out: [a]}, attrs: {axis: 1}}
        - {type: tanh, inputs: {X: [a]}, outputs: {Out: [h_next]}}
        - {type: assign, inputs: {X: [h_next]}, outputs: {Out: [h]}}
        - {type: increment, inputs: {X: [i]}, outputs: {Out: [i]}}
        - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [more]}}
data:
  format: csv
  train: {path: train.csv, feeds: {x0: "1:3", x1: "3:5", x2: "5:7", label: label}}
  eval: {path: eval.csv, feeds: {x0: "1:3", x1: "3:5", x2: "5:7", label: label}}
)";

// 1 thread per rank (the machine may have 2 cores for 2 ranks); 67 rows in
// batches of 16 leave a last batch of 3, which two ranks split 1 + 2.
std::string Config(const std::string& program, const std::string& ckpt_dir, const std::string& extra = "",
                   const std::string& checkpoint_keys = "every_epoch: true, keep_last: 0") {
  return std::string("seed: 5\nloss: loss\nthreads: 1\n") + program +
         "  batch_size: 16\n  eval_batch_size: 7\noptimizer: {type: momentum, lr: 0.1, momentum: 0.9}\n"
         "metrics: {accuracy: {}}\nepochs: 3\nlogging: {progress: lines, every_steps: 5}\n"
         "checkpoint: {dir: " +
         ckpt_dir + ", " + checkpoint_keys + "}\n" + extra;
}

class DistributedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    dir_.Write("train.csv", ClassesCsv(67, 1));
    dir_.Write("eval.csv", ClassesCsv(23, 2));
  }

  // Trains `program` in one process and on `ranks` ranks and compares every
  // persistable var of the last checkpoints.
  void ExpectSameTraining(const std::string& program, int ranks = 2) {
    const std::string n = std::to_string(ranks);
    dir_.Write("one.yaml", Config(program, "ckpt1"));
    dir_.Write("two.yaml", Config(program, "ckpt2", "distributed: {world_size: " + n + ", bucket_mb: 0.0001}\n"));
    Result one = Shell(dir_, kNabla + " run one.yaml");
    ASSERT_EQ(one.rc, 0) << one.out << one.err;
    Result two = Shell(dir_, Mpirun(ranks) + kNabla + " run two.yaml");
    ASSERT_EQ(two.rc, 0) << two.out << two.err;

    // Rank 0 alone reports, and says how many ranks trained.
    EXPECT_EQ(Count(two.out, "== summary =="), 1u) << two.out;
    EXPECT_NE(two.out.find("world            " + n + " ranks (MPI, data parallel), global batch 16"), std::string::npos)
        << two.out;
    EXPECT_EQ(one.out.find("world  "), std::string::npos) << one.out;
    EXPECT_EQ(two.err, "");
    // Same steps (5 batches an epoch, the last one of 2 or 3 rows split
    // unevenly), same checkpoints.
    auto c1 = ListCheckpoints(dir_.Path("ckpt1"));
    auto c2 = ListCheckpoints(dir_.Path("ckpt2"));
    ASSERT_EQ(c1.size(), 3u);
    ASSERT_EQ(c2.size(), 3u);
    EXPECT_EQ(c2.back().step, 15);
    SafetensorsFile a = ReadSafetensors(c1.back().path), b = ReadSafetensors(c2.back().path);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    double moved = 0;
    for (const auto& [name, t] : a.tensors) {
      ASSERT_TRUE(b.tensors.count(name)) << name;
      const Tensor& u = b.tensors.at(name);
      ASSERT_EQ(t.GetShape(), u.GetShape()) << name;
      for (int64_t i = 0; i < t.Numel(); ++i) {
        const float x = t.Data<float>()[i], y = u.Data<float>()[i];
        EXPECT_NEAR(x, y, 2e-5 + 2e-5 * std::fabs(x)) << name << "[" << i << "]";
      }
      if (name.find('@') == std::string::npos) {
        SafetensorsFile first = ReadSafetensors(c1.front().path);
        moved += std::fabs(t.Data<float>()[0] - first.tensors.at(name).Data<float>()[0]);
      }
    }
    EXPECT_GT(moved, 1e-3) << "the parameters did not train";
    // The summary's eval metrics are reduced over the ranks' shards.
    auto eval_line = [](const std::string& out) { return out.substr(out.find("eval loss        ")); };
    EXPECT_EQ(eval_line(one.out).substr(0, 40), eval_line(two.out).substr(0, 40));
  }

  TempDir dir_;
};

TEST_F(DistributedTest, MlpOnTwoRanksMatchesOneProcess) { ExpectSameTraining(kMlp); }

TEST_F(DistributedTest, WhileLoopRnnOnTwoRanksMatchesOneProcess) { ExpectSameTraining(kRnn); }

// 66 rows leave a last batch of 2 rows for 3 ranks: rank 0 has none, feeds a
// stand-in row and scales its gradient by 0, and still joins every allreduce.
TEST_F(DistributedTest, ThreeRanksWithAnEmptyShardMatchOneProcess) {
  dir_.Write("train.csv", ClassesCsv(66, 1));
  ExpectSameTraining(kMlp, 3);
}

// --resume reads the checkpoint on rank 0 and broadcasts parameters, Adam's
// moments and the position in the epoch: the resumed run ends exactly where
// an uninterrupted one does.
TEST_F(DistributedTest, ResumeOnTwoRanksContinuesExactly) {
  const std::string adam = "optimizer: {type: adam, lr: 0.01}\n";
  std::string cfg = Config(kMlp, "ckpt", "", "every_steps: 2, keep_last: 0");
  cfg.replace(cfg.find("optimizer: {type: momentum"),
              cfg.find("\n", cfg.find("optimizer: {type: momentum")) + 1 - cfg.find("optimizer: {type: momentum"),
              adam);
  dir_.Write("run.yaml", cfg);
  Result a = Shell(dir_, kMpirun + kNabla + " run run.yaml --steps 7");
  ASSERT_EQ(a.rc, 0) << a.out << a.err;
  SafetensorsFile straight = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 7));
  std::filesystem::remove_all(dir_.Path("ckpt"));

  ASSERT_EQ(Shell(dir_, kMpirun + kNabla + " run run.yaml --steps 4").rc, 0);
  Result c = Shell(dir_, kMpirun + kNabla + " run run.yaml --steps 7 --resume");
  ASSERT_EQ(c.rc, 0) << c.out << c.err;
  EXPECT_EQ(Count(c.out, "resumed from ckpt/ckpt-00000004.safetensors (step 4, epoch 0, batch 4)"), 1u) << c.out;
  SafetensorsFile resumed = ReadSafetensors(CheckpointPath(dir_.Path("ckpt"), 7));
  ASSERT_EQ(straight.tensors.size(), resumed.tensors.size());
  EXPECT_TRUE(straight.tensors.count("w1@moment2"));
  for (const auto& [name, t] : straight.tensors) {
    const Tensor& u = resumed.tensors.at(name);
    ASSERT_EQ(t.Bytes(), u.Bytes()) << name;
    EXPECT_EQ(std::memcmp(t.RawData(), u.RawData(), t.Bytes()), 0) << name << " differs after resume";
  }
  EXPECT_EQ(resumed.metadata.at("epoch"), "1");
}

TEST_F(DistributedTest, BackwardShowsTheCollectives) {
  // The program part of the MLP config as a program file.
  std::string cfg = kMlp;
  std::string prog = cfg.substr(cfg.find("  format:"), cfg.find("data:") - cfg.find("  format:"));
  std::string text;
  std::istringstream in(prog);
  for (std::string line; std::getline(in, line);) text += line.substr(2) + "\n";
  dir_.Write("mlp.yaml", text);
  Result per_grad = Shell(dir_, kNabla + " backward mlp.yaml --loss loss --data-parallel 4 --bucket-mb 0");
  ASSERT_EQ(per_grad.rc, 0) << per_grad.err;
  EXPECT_EQ(Count(per_grad.out, "type: c_allreduce_sum"), 4u) << per_grad.out;
  EXPECT_NE(per_grad.out.find("value: 0.25"), std::string::npos) << per_grad.out;
  Result bucketed = Shell(dir_, kNabla + " backward mlp.yaml --loss loss --data-parallel 2");
  ASSERT_EQ(bucketed.rc, 0) << bucketed.err;
  EXPECT_EQ(Count(bucketed.out, "type: c_allreduce_sum"), 1u) << bucketed.out;
  Result bad = Shell(dir_, kNabla + " backward mlp.yaml --loss loss --data-parallel 0");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--data-parallel must be a rank count >= 1, but received 0"), std::string::npos) << bad.err;
}

TEST_F(DistributedTest, AskingForRanksWithoutMpirunIsExit2) {
  dir_.Write("two.yaml", Config(kMlp, "ckpt", "distributed: {world_size: 2}\n"));
  Result r = Shell(dir_, kNabla + " run two.yaml");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(Count(r.err, "\n"), 1u) << r.err;
  EXPECT_NE(r.err.find("distributed.world_size asks for 2 data-parallel ranks, but nabla was not started by an MPI "
                       "launcher; run `mpirun -np 2 nabla run two.yaml`"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.Path("ckpt")));
}

TEST_F(DistributedTest, AStalledRankTimesOutWithOneLineAndKeepsTheCheckpoint) {
  // Rank 1 stops after 2 steps (and leaves); rank 0 waits for it in the
  // allreduces of step 3 until collective_timeout_s (4 s: rank 1 may reach
  // the startup broadcast seconds late on a loaded machine). No eval split, so rank
  // 1 runs no collective rank 0 does not.
  std::string cfg = Config(kMlp, "ckpt", "distributed: {collective_timeout_s: 4}\n", "every_steps: 1, keep_last: 2");
  cfg.erase(cfg.find("  eval: {"), cfg.find("\n", cfg.find("  eval: {")) + 1 - cfg.find("  eval: {"));
  dir_.Write("run.yaml", cfg);
  Result r =
      Shell(dir_, kMpirun + "sh -c 'exec " + kNabla + " run run.yaml --steps $((OMPI_COMM_WORLD_RANK == 1 ? 2 : 10))'");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_EQ(Count(r.err, "nabla: error:"), 1u) << r.err;
  EXPECT_NE(r.err.find("timed out on rank 0 of 2 after 4 s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("c_allreduce_sum ["), std::string::npos) << r.err;
  auto all = ListCheckpoints(dir_.Path("ckpt"));
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().step, 2);
  SafetensorsFile f = ReadSafetensors(all.back().path);
  EXPECT_TRUE(f.tensors.count("w1"));
}

}  // namespace
}  // namespace nabla::train
