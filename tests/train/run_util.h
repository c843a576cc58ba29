#pragma once
// Running `nabla run` from the training tests: the binary in a scratch
// folder, a synthetic three-class dataset and a linear-classifier config.
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace nabla::train {

using testing::TempDir;

struct Result {
  int rc = -1;
  std::string out, err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline Result Nabla(const TempDir& dir, const std::string& args) {
  std::string cmd = "cd '" + dir.Dir().string() + "' && " + NABLA_BIN_PATH + " " + args + " >stdout.txt 2>stderr.txt";
  int status = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(dir.Path("stdout.txt"));
  r.err = Slurp(dir.Path("stderr.txt"));
  return r;
}

// Three well separated classes in 4 features, from a fixed LCG.
inline std::string BlobsCsv(int rows, uint32_t seed, int nan_row = -1) {
  std::ostringstream s;
  s << "label,f0,f1,f2,f3\n";
  uint32_t state = seed;
  auto noise = [&] {
    state = state * 1664525u + 1013904223u;
    return (static_cast<double>(state >> 8) / (1 << 24) - 0.5) * 1.2;
  };
  const double centers[3][4] = {{1, 0, 0, 1}, {0, 1, 1, 0}, {-1, -1, 0, 0}};
  for (int i = 0; i < rows; ++i) {
    int c = i % 3;
    s << c;
    for (int j = 0; j < 4; ++j) {
      if (i == nan_row && j == 2) {
        s << ",nan";
      } else {
        s << "," << centers[c][j] + noise();
      }
    }
    s << "\n";
  }
  return s.str();
}

inline const char* kProgram = R"(program:
  format: nabla-program/1
  blocks:
    - idx: 0
      parent: -1
      vars:
        x: {shape: [-1, 4], dtype: float32, stop_gradient: true}
        label: {shape: [-1, 1], dtype: int64}
        w: {shape: [4, 3], dtype: float32, persistable: true,
            init: {type: uniform_random, min: -0.1, max: 0.1, seed: 3}}
        b: {shape: [3], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
      ops:
        - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
        - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [logits]}, attrs: {axis: 1}}
        - type: softmax_with_cross_entropy
          inputs: {Logits: [logits], Label: [label]}
          outputs: {Softmax: [prob], Loss: [ce]}
        - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)";

inline std::string Config(const std::string& optimizer, const std::string& extra = "") {
  return std::string("seed: 5\nloss: loss\n") + kProgram + "optimizer: " + optimizer + R"(
data:
  format: csv
  train: {path: train.csv, feeds: {x: "1:5", label: label}}
  eval: {path: eval.csv, feeds: {x: "1:5", label: label}}
  batch_size: 16
metrics: {accuracy: {}}
)" + extra;
}

}  // namespace nabla::train
