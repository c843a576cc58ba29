// Training on OpenCL matches the CPU: a small MLP (mul, elementwise_add with
// a broadcast bias, relu, tanh, softmax_with_cross_entropy, mean) with its
// backward part and SGD updates, 20 steps on each device from the same
// initial parameters and batches; every step's loss agrees to 1e-4
// relative. Also the taskgraph executor on OpenCL, and the Adam variant.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/opencl/opencl.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

const char* kMlp = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x:     {shape: [-1, 20], dtype: float32, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64}
      w1:    {shape: [20, 32], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.3, max: 0.3, seed: 1}}
      b1:    {shape: [32], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.1}}
      w2:    {shape: [32, 16], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.3, max: 0.3, seed: 2}}
      b2:    {shape: [16], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
      w3:    {shape: [16, 5], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.3, max: 0.3, seed: 3}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [xw1]}}
      - {type: elementwise_add, inputs: {X: [xw1], Y: [b1]}, outputs: {Out: [a1]}, attrs: {axis: 1}}
      - {type: relu, inputs: {X: [a1]}, outputs: {Out: [h1]}}
      - {type: mul, inputs: {X: [h1], Y: [w2]}, outputs: {Out: [xw2]}}
      - {type: elementwise_add, inputs: {X: [xw2], Y: [b2]}, outputs: {Out: [a2]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [a2]}, outputs: {Out: [h2]}}
      - {type: mul, inputs: {X: [h2], Y: [w3]}, outputs: {Out: [logits]}}
      - type: softmax_with_cross_entropy
        inputs: {Logits: [logits], Label: [label]}
        outputs: {Softmax: [prob], Loss: [ce]}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)";

class OpenClTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
  }
};

// The program with backward and one optimizer op per parameter.
ProgramDesc TrainProgram(const std::string& optimizer) {
  ProgramDesc program = ParseProgram(kMlp, "mlp.yaml");
  ParamGrads pg = AppendBackward(program, "loss");
  EXPECT_EQ(pg.size(), 5u);
  BlockDesc& block = *program.Root();
  for (const auto& [param, grad] : pg) {
    OpDesc op;
    op.SetType(optimizer);
    op.SetInput("Param", {param});
    op.SetInput("Grad", {grad});
    op.SetInput("LearningRate", {"lr"});
    op.SetOutput("ParamOut", {param});
    if (optimizer == "adam") {
      op.SetInput("Moment1", {param + "_m1"});
      op.SetInput("Moment2", {param + "_m2"});
      op.SetInput("Beta1Pow", {param + "_b1p"});
      op.SetInput("Beta2Pow", {param + "_b2p"});
      op.SetOutput("Moment1Out", {param + "_m1"});
      op.SetOutput("Moment2Out", {param + "_m2"});
      op.SetOutput("Beta1PowOut", {param + "_b1p"});
      op.SetOutput("Beta2PowOut", {param + "_b2p"});
    }
    FillDefaultAttrs(op, *CurrentRegistry());
    block.AppendOp(std::move(op));
  }
  return program;
}

void SetHost(Scope& scope, const std::string& name, DType dtype, const Shape& shape, const std::vector<double>& v,
             Device& device) {
  Tensor host;
  void* p = host.Allocate(HostDevice(), dtype, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kFloat32)
      static_cast<float*>(p)[i] = static_cast<float>(v[i]);
    else
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v[i]);
  }
  scope.Var(name)->GetTensor().CopyFrom(host, device);
}

float Loss(const Scope& scope) {
  Tensor host;
  host.CopyFrom(scope.FindVar("loss")->GetTensor(), HostDevice());
  return host.Data<float>()[0];
}

// 20 steps of `optimizer` on `device`; each step a new batch from a fixed
// seed, so both devices see the same data.
std::vector<float> Train(Device& device, const std::string& executor, const std::string& optimizer) {
  ProgramDesc program = TrainProgram(optimizer);
  Scope scope;
  ExecutorOptions options;
  options.seed = 9;
  options.threads = 2;
  auto exec = CreateExecutor(executor, device, options);
  exec->Run(BuildStartupProgram(program), 0, scope);
  SetHost(scope, "lr", DType::kFloat32, {1}, {optimizer == "adam" ? 0.01 : 0.2}, device);
  if (optimizer == "adam") {
    for (const char* p : {"w1", "b1", "w2", "b2", "w3"}) {
      const Shape shape = scope.FindVar(p)->GetTensor().GetShape();
      std::vector<double> zeros(static_cast<size_t>(NumElements(shape)), 0.0);
      SetHost(scope, std::string(p) + "_m1", DType::kFloat32, shape, zeros, device);
      SetHost(scope, std::string(p) + "_m2", DType::kFloat32, shape, zeros, device);
      SetHost(scope, std::string(p) + "_b1p", DType::kFloat32, {1}, {0.9}, device);
      SetHost(scope, std::string(p) + "_b2p", DType::kFloat32, {1}, {0.999}, device);
    }
  }
  std::mt19937_64 rng(123);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> cls(0, 4);
  std::vector<float> losses;
  const int64_t batch = 24;
  for (int step = 0; step < 20; ++step) {
    std::vector<double> x(batch * 20), label(batch);
    for (int64_t i = 0; i < batch; ++i) {
      label[i] = cls(rng);
      for (int j = 0; j < 20; ++j) x[i * 20 + j] = normal(rng) + (j % 5 == label[i] ? 1.5 : 0.0);
    }
    SetHost(scope, "x", DType::kFloat32, {batch, 20}, x, device);
    SetHost(scope, "label", DType::kInt64, {batch, 1}, label, device);
    exec->Run(program, 0, scope);
    losses.push_back(Loss(scope));
  }
  for (const char* p : {"w1", "b1", "w2", "b2", "w3"})
    EXPECT_EQ(scope.FindVar(p)->GetTensor().GetDevice(), &device) << p << " left " << device.Name();
  return losses;
}

void ExpectSameLosses(const std::vector<float>& cpu, const std::vector<float>& cl) {
  ASSERT_EQ(cpu.size(), cl.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(cl[i], cpu[i], 1e-4 * std::abs(cpu[i])) << "step " << i;
  EXPECT_LT(cpu.back(), cpu.front()) << "the MLP should learn";
}

TEST_F(OpenClTraining, TwentySgdStepsMatchTheCpu) {
  if (!CurrentRegistry()->Find("sgd")) GTEST_SKIP() << "nn_ops is not loaded";
  ExpectSameLosses(Train(HostDevice(), "sequential", "sgd"), Train(opencl::GetDevice(0), "sequential", "sgd"));
}

TEST_F(OpenClTraining, TwentyAdamStepsMatchTheCpu) {
  if (!CurrentRegistry()->Find("adam")) GTEST_SKIP() << "nn_ops is not loaded";
  ExpectSameLosses(Train(HostDevice(), "sequential", "adam"), Train(opencl::GetDevice(0), "sequential", "adam"));
}

TEST_F(OpenClTraining, TheTaskGraphExecutorRunsOnOpenCl) {
  if (!CurrentRegistry()->Find("sgd")) GTEST_SKIP() << "nn_ops is not loaded";
  ExpectSameLosses(Train(HostDevice(), "sequential", "sgd"), Train(opencl::GetDevice(0), "taskgraph", "sgd"));
}

}  // namespace
}  // namespace nabla
