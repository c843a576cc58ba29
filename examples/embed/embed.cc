// Embedding nabla in a C++ program: load the standard plugins, read a
// program, append its backward part and an sgd update per parameter through
// the pass pipeline `nabla run` uses (nabla/train/pipeline.h), then
// run a few training steps on data made here and print the loss.
//
//   embed PROGRAM.yaml [STEPS]
//
// The program must take x [N, 4] and y [N, 1] and compute `loss`
// (examples/embed/regression.yaml does). Errors print one line, exit 2.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/nabla.h"
#include "nabla/train.h"
#include "nabla/train/pipeline.h"

namespace {

// y = x·[1, -2, 0.5, 3] + 0.25, the relation the model should learn.
void MakeBatch(std::mt19937& rng, int64_t n, nabla::Tensor& x, nabla::Tensor& y) {
  const float true_w[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  std::normal_distribution<float> dist(0.0f, 1.0f);
  float* xs = x.Allocate<float>(nabla::HostDevice(), {n, 4});
  float* ys = y.Allocate<float>(nabla::HostDevice(), {n, 1});
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0.25f;
    for (int j = 0; j < 4; ++j) {
      xs[i * 4 + j] = dist(rng);
      acc += xs[i * 4 + j] * true_w[j];
    }
    ys[i] = acc;
  }
}

int Run(const std::string& path, long steps) {
  using namespace nabla;
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();

  ProgramDesc program = LoadProgram(path);
  // The passes `nabla run` applies, in its order: fusion, the backward part,
  // one sgd op per parameter, the gradient rewrites.
  train::PassPipelineOptions passes;
  passes.fuse = true;
  passes.loss = "loss";
  train::OptimizerOptions sgd;
  sgd.lr = 0.1;
  passes.optimizer = sgd;
  train::ApplyPassPipeline(program, passes);

  Device& device = HostDevice();
  std::unique_ptr<Executor> executor = CreateExecutor("sequential", device, ExecutorOptions{});
  Scope scope;
  executor->Run(BuildStartupProgram(program, {"x", "y"}), 0, scope);

  std::mt19937 rng(42);
  for (long step = 1; step <= steps; ++step) {
    Tensor& x = scope.Var("x")->GetTensor();
    Tensor& y = scope.Var("y")->GetTensor();
    MakeBatch(rng, 32, x, y);
    executor->Run(program, 0, scope);
    const float loss = scope.FindVar("loss")->GetTensor().Data<float>()[0];
    std::printf("step %ld loss %.6f\n", step, loss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: embed PROGRAM.yaml [STEPS]\n";
    return 2;
  }
  char* end = nullptr;
  const long steps = argc == 3 ? std::strtol(argv[2], &end, 10) : 20;
  if (steps <= 0 || steps > 1000000 || (argc == 3 && *end != '\0')) {
    std::cerr << "embed: error: STEPS must be a positive integer but received '" << argv[2] << "'\n";
    return 2;
  }
  try {
    return Run(argv[1], steps);
  } catch (const nabla::Error& e) {
    // As the nabla CLI: bad input is exit 2, anything else 1.
    std::cerr << "embed: error: " << e.what() << "\n";
    const nabla::ErrorKind k = e.kind();
    const bool bad_input = k == nabla::ErrorKind::kInvalidArgument || k == nabla::ErrorKind::kNotFound ||
                           k == nabla::ErrorKind::kAlreadyExists || k == nabla::ErrorKind::kOutOfRange ||
                           k == nabla::ErrorKind::kPreconditionNotMet;
    return bad_input ? 2 : 1;
  }
}
