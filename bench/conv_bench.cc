// conv2d and pool2d through the executor (issue 15): one op's forward and
// backward on the shapes of examples/models/fashion_mnist_cnn.yaml at batch
// 64, float32 on oneDNN against the im2col + GEMM / loop reference
// (NABLA_DNNL=0), at 1 and 2 threads. The GFLOPS counter counts the
// convolution's multiply-adds (forward, backward weights and, except for the
// first layer, backward data). Where oneDNN has no JIT pooling for plain
// NCHW (CPUs without AVX-512) pool2d runs its loops in both rows.
//
//   OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 build/bin/conv_bench --benchmark_repetitions=3
//
// Loads the standard plugins from the build tree.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "bench_util.h"
#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

using bench::InitRuntime;

std::string Dims(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// `op_line` reads x (and w) and writes y; loss = mean(y) so the backward
// part is exactly the op's grad op plus a fill.
ProgramDesc OneOpProgram(const Shape& x, const Shape* w, const std::string& op_line, bool x_grad = true) {
  InitRuntime();
  std::string s =
      "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n      x: {shape: " + Dims(x) +
      ", dtype: float32, stop_gradient: " + (x_grad ? "false" : "true") + "}\n";
  if (w) s += "      w: {shape: " + Dims(*w) + ", dtype: float32, persistable: true}\n";
  s += "    ops:\n      - " + op_line + "\n      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}\n";
  ProgramDesc p = ParseProgram(s, "bench.yaml");
  AppendBackward(p, "loss");
  return p;
}

void RunSteps(benchmark::State& state, const ProgramDesc& program, const Shape& x, const Shape* w, bool dnnl,
              int threads) {
  InitRuntime();
  setenv("NABLA_DNNL", dnnl ? "1" : "0", 1);
  ExecutorOptions options;
  options.threads = threads;
  auto exec = CreateExecutor("sequential", HostDevice(), options);
  Scope scope;
  bench::SetTensor(scope, "x", DType::kFloat32, x, bench::RandomFloats(NumElements(x), 1).data(), HostDevice());
  if (w)
    bench::SetTensor(scope, "w", DType::kFloat32, *w, bench::RandomFloats(NumElements(*w), 2).data(), HostDevice());
  exec->Run(program, 0, scope);
  for (auto _ : state) exec->Run(program, 0, scope);
  unsetenv("NABLA_DNNL");
}

// args: input channels, output channels, image size, oneDNN on, threads.
// A one-channel input is the image itself, as in the CNN: no Input@GRAD.
void BM_Conv2dStep(benchmark::State& state) {
  const int64_t c = state.range(0), m = state.range(1), size = state.range(2), n = 64;
  const Shape x{n, c, size, size}, w{m, c, 3, 3};
  ProgramDesc p = OneOpProgram(
      x, &w, "{type: conv2d, inputs: {Input: [x], Filter: [w]}, outputs: {Output: [y]}, attrs: {paddings: [1, 1]}}",
      c > 1);
  RunSteps(state, p, x, &w, state.range(3) != 0, static_cast<int>(state.range(4)));
  const double flops = (c > 1 ? 3.0 : 2.0) * 2.0 * n * m * size * size * c * 9;
  state.counters["GFLOPS"] = benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(state.range(3) ? "oneDNN" : "im2col+GEMM");
}
BENCHMARK(BM_Conv2dStep)
    ->ArgNames({"cin", "cout", "hw", "dnnl", "threads"})
    ->ArgsProduct({{1}, {32}, {28}, {1, 0}, {1, 2}})
    ->ArgsProduct({{32}, {64}, {14}, {1, 0}, {1, 2}})
    ->Unit(benchmark::kMillisecond);

// args: channels, image size, oneDNN on, threads: 2x2 max pooling, stride 2.
void BM_MaxPool2dStep(benchmark::State& state) {
  const int64_t c = state.range(0), size = state.range(1);
  const Shape x{64, c, size, size};
  ProgramDesc p = OneOpProgram(x, nullptr,
                               "{type: pool2d, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {pooling_type: max, "
                               "ksize: [2, 2], strides: [2, 2]}}");
  RunSteps(state, p, x, nullptr, state.range(2) != 0, static_cast<int>(state.range(3)));
  state.SetLabel(state.range(2) ? "oneDNN" : "loops");
}
BENCHMARK(BM_MaxPool2dStep)
    ->ArgNames({"c", "hw", "dnnl", "threads"})
    ->ArgsProduct({{32}, {28}, {1, 0}, {1, 2}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nabla
