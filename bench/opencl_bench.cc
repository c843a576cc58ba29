// The OpenCL backend against the CPU backend: square SGEMM (CLBlast vs
// OpenBLAS) at 128..1024, and one training step (forward, backward, SGD) of
// the Fashion-MNIST MLP shape (784-256-256-10, batch 64) on each device.
//
//   OPENBLAS_CORETYPE=SkylakeX build/bin/opencl_bench --benchmark_repetitions=3
//
// On PoCL the OpenCL numbers only show the path works (CLBlast has no tuned
// parameters for PoCL); on a GPU they are the point. The first
// call of each GEMM shape compiles CLBlast's kernels (~20 s per program with
// a cold PoCL cache), so every benchmark warms up before timing. OpenCL
// timings include a clFinish per iteration.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
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

using bench::RandomFloats;
using bench::SetTensor;

void BM_GemmCpu(benchmark::State& state) {
  cpu::InitCpuBackend();
  const int64_t n = state.range(0);
  std::vector<float> a = RandomFloats(n * n, 1), b = RandomFloats(n * n, 2), c(n * n);
  for (auto _ : state) {
    cpu::Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  bench::SetGemmFlops(state, n);
  state.SetLabel(cpu::BlasCoreName());
}

void BM_GemmOpenCl(benchmark::State& state) {
  cpu::InitCpuBackend();
  opencl::OpenClDevice& dev = opencl::GetDevice(0);
  const int64_t n = state.range(0);
  const size_t bytes = n * n * sizeof(float);
  std::vector<float> a = RandomFloats(n * n, 1), b = RandomFloats(n * n, 2);
  void* da = dev.Allocate(bytes);
  void* db = dev.Allocate(bytes);
  void* dc = dev.Allocate(bytes);
  dev.CopyFromHost(da, a.data(), bytes);
  dev.CopyFromHost(db, b.data(), bytes);
  dev.Gemm(false, false, n, n, n, 1.0f, da, 0, n, db, 0, n, 0.0f, dc, 0, n);  // compiles CLBlast's kernels
  dev.Synchronize();
  for (auto _ : state) {
    dev.Gemm(false, false, n, n, n, 1.0f, da, 0, n, db, 0, n, 0.0f, dc, 0, n);
    dev.Synchronize();
  }
  bench::SetGemmFlops(state, n);
  state.SetLabel(dev.Name());
  dev.Free(da, bytes);
  dev.Free(db, bytes);
  dev.Free(dc, bytes);
}

BENCHMARK(BM_GemmCpu)->RangeMultiplier(2)->Range(128, 1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemmOpenCl)->RangeMultiplier(2)->Range(128, 1024)->Unit(benchmark::kMillisecond);

const char* kMlp = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      image: {shape: [-1, 784], dtype: float32, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64}
      fc1_w: {shape: [784, 256], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.08, max: 0.08, seed: 11}}
      fc1_b: {shape: [256], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
      fc2_w: {shape: [256, 256], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.1, max: 0.1, seed: 12}}
      fc2_b: {shape: [256], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
      fc3_w: {shape: [256, 10], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.1, max: 0.1, seed: 13}}
      fc3_b: {shape: [10], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
    ops:
      - {type: mul, inputs: {X: [image], Y: [fc1_w]}, outputs: {Out: [fc1_xw]}}
      - {type: elementwise_add, inputs: {X: [fc1_xw], Y: [fc1_b]}, outputs: {Out: [fc1]}, attrs: {axis: 1}}
      - {type: relu, inputs: {X: [fc1]}, outputs: {Out: [h1]}}
      - {type: mul, inputs: {X: [h1], Y: [fc2_w]}, outputs: {Out: [fc2_xw]}}
      - {type: elementwise_add, inputs: {X: [fc2_xw], Y: [fc2_b]}, outputs: {Out: [fc2]}, attrs: {axis: 1}}
      - {type: relu, inputs: {X: [fc2]}, outputs: {Out: [h2]}}
      - {type: mul, inputs: {X: [h2], Y: [fc3_w]}, outputs: {Out: [fc3_xw]}}
      - {type: elementwise_add, inputs: {X: [fc3_xw], Y: [fc3_b]}, outputs: {Out: [logits]}, attrs: {axis: 1}}
      - type: softmax_with_cross_entropy
        inputs: {Logits: [logits], Label: [label]}
        outputs: {Softmax: [prob], Loss: [ce]}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)";

// One step = the whole program (forward, backward, SGD) on a fed batch; the
// feeds are uploaded once, as a training loop with device-side data would.
void BM_MlpStep(benchmark::State& state, bool on_opencl) {
  bench::InitRuntime();
  Device& device = on_opencl ? static_cast<Device&>(opencl::GetDevice(0)) : HostDevice();
  ProgramDesc program = ParseProgram(kMlp, "mlp.yaml");
  for (const auto& [param, grad] : AppendBackward(program, "loss")) {
    OpDesc op("sgd", {{"Param", {param}}, {"Grad", {grad}}, {"LearningRate", {"lr"}}}, {{"ParamOut", {param}}}, {});
    FillDefaultAttrs(op, *CurrentRegistry());
    program.Root()->AppendOp(std::move(op));
  }
  Scope scope;
  auto exec = CreateExecutor("sequential", device);
  exec->Run(BuildStartupProgram(program), 0, scope);
  const int64_t batch = 64;
  std::vector<float> image = RandomFloats(batch * 784, 3);
  std::vector<int64_t> label(batch);
  for (int64_t i = 0; i < batch; ++i) label[i] = i % 10;
  const float lr = 0.01f;
  SetTensor(scope, "image", DType::kFloat32, {batch, 784}, image.data(), device);
  SetTensor(scope, "label", DType::kInt64, {batch, 1}, label.data(), device);
  SetTensor(scope, "lr", DType::kFloat32, {1}, &lr, device);
  exec->Run(program, 0, scope);  // compiles every kernel once
  device.Synchronize();
  for (auto _ : state) {
    exec->Run(program, 0, scope);
    device.Synchronize();
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetLabel(device.Name());
}

BENCHMARK_CAPTURE(BM_MlpStep, cpu, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MlpStep, opencl, true)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nabla
