// The CPU executors' costs (issue 5):
//  - per-op overhead: a chain of 1000 tiny ops (16 floats each) through the
//    sequential and the taskgraph executor, forward only and forward +
//    backward; the "per_op_ns" counter is the time per op;
//  - `mul` through the executor against cblas_sgemm called directly at
//    128^3 .. 1024^3; the target is >= 90 % of raw sgemm at 512^3;
//  - the host allocator (tbbmalloc pools) on the sizes a step allocates.
//
//   OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 build/bin/executor_bench --benchmark_repetitions=3
//
// Loads the standard plugins from the build tree.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>

#include "bench_util.h"
#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

using bench::InitRuntime;

using bench::RandomFloats;
using bench::SetGemmFlops;

void SetTensor(Scope& scope, const std::string& name, const Shape& shape, const std::vector<float>& data) {
  bench::SetTensor(scope, name, DType::kFloat32, shape, data.data(), HostDevice());
}

// x * w, then alternating tanh / scale, then mean: `n` ops in all.
std::string TinyChain(int n) {
  std::string s =
      "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n"
      "      x: {shape: [1, 16], dtype: float32, stop_gradient: true}\n"
      "      w: {shape: [1, 16], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}\n"
      "    ops:\n"
      "      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [t0]}}\n";
  for (int i = 1; i < n - 1; ++i) {
    const std::string in = "t" + std::to_string(i - 1), out = "t" + std::to_string(i);
    if (i % 2) {
      s += "      - {type: tanh, inputs: {X: [" + in + "]}, outputs: {Out: [" + out + "]}}\n";
    } else {
      s += "      - {type: scale, inputs: {X: [" + in + "]}, outputs: {Out: [" + out + "]}, attrs: {scale: 1.5}}\n";
    }
  }
  s += "      - {type: mean, inputs: {X: [t" + std::to_string(n - 2) + "]}, outputs: {Out: [loss]}}\n";
  return s;
}

// args: executor name, with backward
void BM_TinyOpChain(benchmark::State& state, const char* executor, bool backward) {
  InitRuntime();
  constexpr int kOps = 1000;
  ProgramDesc program = ParseProgram(TinyChain(kOps), "tiny_chain.yaml");
  if (backward) AppendBackward(program, "loss");
  const size_t ops = program.Root()->OpSize();
  ExecutorOptions options;
  options.threads = 1;
  auto exec = CreateExecutor(executor, HostDevice(), options);
  Scope scope;
  exec->Run(BuildStartupProgram(program), 0, scope);
  SetTensor(scope, "x", {1, 16}, RandomFloats(16, 1));
  exec->Run(program, 0, scope);
  for (auto _ : state) exec->Run(program, 0, scope);
  state.counters["per_op_ns"] = benchmark::Counter(static_cast<double>(state.iterations() * ops),
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(std::to_string(ops) + " ops, " + bench::PluginsLabel());
}
BENCHMARK_CAPTURE(BM_TinyOpChain, sequential_forward, "sequential", false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TinyOpChain, taskgraph_forward, "taskgraph", false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TinyOpChain, sequential_forward_backward, "sequential", true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TinyOpChain, taskgraph_forward_backward, "taskgraph", true)->Unit(benchmark::kMicrosecond);

void BM_RawSgemm(benchmark::State& state) {
  InitRuntime();
  const int64_t n = state.range(0);
  std::vector<float> a = RandomFloats(n * n, 1), b = RandomFloats(n * n, 2), c(n * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  SetGemmFlops(state, n);
  state.SetLabel(cpu::BlasCoreName());
}
BENCHMARK(BM_RawSgemm)->RangeMultiplier(2)->Range(128, 1024)->Unit(benchmark::kMicrosecond);

// One `mul` op as a program: shape inference, dispatch, output reuse and
// the kernel's GEMM, through the executor.
void BM_MulOp(benchmark::State& state, const char* executor) {
  InitRuntime();
  const int64_t n = state.range(0);
  const std::string dim = std::to_string(n);
  ProgramDesc program = ParseProgram(
      "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n"
      "      a: {shape: [" +
          dim + ", " + dim +
          "], dtype: float32}\n"
          "      b: {shape: [" +
          dim + ", " + dim +
          "], dtype: float32}\n"
          "    ops:\n      - {type: mul, inputs: {X: [a], Y: [b]}, outputs: {Out: [c]}}\n",
      "mul.yaml");
  ExecutorOptions options;
  options.threads = 1;
  auto exec = CreateExecutor(executor, HostDevice(), options);
  Scope scope;
  SetTensor(scope, "a", {n, n}, RandomFloats(n * n, 1));
  SetTensor(scope, "b", {n, n}, RandomFloats(n * n, 2));
  exec->Run(program, 0, scope);
  for (auto _ : state) exec->Run(program, 0, scope);
  SetGemmFlops(state, n);
  state.SetLabel(cpu::BlasCoreName());
}
BENCHMARK_CAPTURE(BM_MulOp, sequential, "sequential")
    ->RangeMultiplier(2)
    ->Range(128, 1024)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MulOp, taskgraph, "taskgraph")
    ->RangeMultiplier(2)
    ->Range(128, 1024)
    ->Unit(benchmark::kMicrosecond);

// Allocate + free of one buffer, the pattern of an intermediate per step.
void BM_HostAllocate(benchmark::State& state) {
  InitRuntime();
  Device& host = HostDevice();
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = host.Allocate(bytes);
    benchmark::DoNotOptimize(p);
    host.Free(p, bytes);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_HostAllocate)->Arg(64)->Arg(4 << 10)->Arg(256 << 10)->Arg(2 << 20);

// A tensor resized to the same shape every step must keep its buffer.
void BM_TensorReallocSameShape(benchmark::State& state) {
  InitRuntime();
  const int64_t n = state.range(0);
  Tensor t;
  for (auto _ : state) {
    void* p = t.Allocate(HostDevice(), DType::kFloat32, {n, n});
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_TensorReallocSameShape)->Arg(16)->Arg(512);

}  // namespace
}  // namespace nabla
