// Eager per-op overhead (nabla/eager.h): compare_torch's case (d) chain of
// tiny ops run eagerly, forward + backward, and single calls. Time per op is
// the number to compare with PyTorch's eager mode (bench/compare_torch,
// case (h)). Loads the standard plugins from the build tree.
#include <benchmark/benchmark.h>

#include "nabla/cpu/cpu.h"
#include "nabla/eager.h"
#include "nabla/plugin.h"

namespace {

using nabla::eager::Call;
using nabla::eager::Tensor;

constexpr int kWidth = 16;

void Setup() {
  static bool done = [] {
    nabla::cpu::InitCpuBackend();
    nabla::PluginManager::Instance().LoadDefaults();
    return true;
  }();
  (void)done;
}

// x * w, then n - 2 alternating tanh / scale(1.5), then mean; Backward to w.
// The same chain as compare_torch's case (d) and its PyTorch loop.
void BM_EagerTinyChain(benchmark::State& state) {
  Setup();
  const int n = static_cast<int>(state.range(0));
  const bool backward = state.range(1) != 0;
  Tensor x = Tensor::FromVector<float>(std::vector<float>(kWidth, 0.25f), {1, kWidth}, false, "x");
  Tensor w = Tensor::FromVector<float>(std::vector<float>(kWidth, 0.5f), {1, kWidth}, true, "w");
  for (auto _ : state) {
    Tensor t = Call("elementwise_mul", {{"X", {x}}, {"Y", {w}}})["Out"];
    for (int i = 1; i < n - 1; ++i)
      t = i % 2 ? Call("tanh", {{"X", {t}}})["Out"] : Call("scale", {{"X", {t}}}, {{"scale", 1.5f}})["Out"];
    Tensor loss = Call("mean", {{"X", {t}}})["Out"];
    if (backward) {
      w.ZeroGrad();
      loss.Backward();
      benchmark::DoNotOptimize(w.Grad().Data().RawData());
    }
  }
  // CPU seconds per op (shown with an "s" suffix by the console reporter;
  // multiply by 1e6 for microseconds).
  state.counters["per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * n,
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_EagerTinyChain)->Args({1000, 1})->Args({1000, 0})->Unit(benchmark::kMicrosecond);

// One call of a tiny op: Call (cache keyed by type, slots and attributes)
// against a held eager::Op, with and without recording.
void BM_EagerCall(benchmark::State& state) {
  Setup();
  const bool held = state.range(0) != 0, grad = state.range(1) != 0;
  Tensor x = Tensor::FromVector<float>(std::vector<float>(kWidth, 0.25f), {1, kWidth}, grad, "x");
  nabla::eager::Op scale("scale", {{"scale", 1.5f}});
  for (auto _ : state) {
    Tensor y = held ? scale({{"X", {x}}})["Out"] : Call("scale", {{"X", {x}}}, {{"scale", 1.5f}})["Out"];
    benchmark::DoNotOptimize(y.Data().RawData());
  }
}
BENCHMARK(BM_EagerCall)->ArgNames({"held", "grad"})->Args({0, 0})->Args({1, 0})->Args({0, 1})->Args({1, 1});

}  // namespace
