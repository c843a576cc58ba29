// Eager per-op overhead (nabla/eager.h): compare_torch's case (d) chain of
// tiny ops run eagerly, forward + backward, and single calls. Time per op is
// the number to compare with PyTorch's eager mode (bench/compare_torch,
// case (h)). Loads the standard plugins from the build tree.
#include <benchmark/benchmark.h>

#include "bench_util.h"

#include <cstdlib>
#include <iostream>
#include <random>

#include "nabla/cpu/cpu.h"
#include "nabla/eager.h"
#include "nabla/plugin.h"

namespace {

using nabla::eager::Call;
using nabla::eager::Tensor;

constexpr int kWidth = 16;

void Setup() { nabla::bench::InitRuntime(); }

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
  state.SetLabel(nabla::bench::PluginsLabel());
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

// The binding's path: a held eager::Op called with an array of slots
// (Op::Run), no TensorMap built; what nabla.ops.<type> and `x + y` cost in
// the core.
void BM_EagerOpRun(benchmark::State& state) {
  Setup();
  const bool grad = state.range(0) != 0;
  Tensor x = Tensor::FromVector<float>(std::vector<float>(kWidth, 0.25f), {1, kWidth}, grad, "x");
  Tensor y = Tensor::FromVector<float>(std::vector<float>(kWidth, 0.5f), {1, kWidth}, false, "y");
  nabla::eager::Op add("elementwise_add");
  const std::string kX = "X", kY = "Y";
  const nabla::eager::SlotInput slots[2] = {{&kX, &x, 1}, {&kY, &y, 1}};
  for (auto _ : state) {
    nabla::eager::Outputs out = add.Run(slots, 2);
    benchmark::DoNotOptimize(out.SlotData(0)->Data().RawData());
  }
}
BENCHMARK(BM_EagerOpRun)->ArgNames({"grad"})->Arg(0)->Arg(1);

// compare_torch's case (b) model, 784-512-512-10 tanh, batch 128, as an
// eager training step: forward, Backward, sgd on every parameter (in place,
// under NoGradGuard). With NABLA_EAGER_BENCH_TRACE=DIR one step's tape is
// saved there first, so `nabla exec` can time the same step as a static
// program (see docs/eager.md).
void BM_EagerMlpStep(benchmark::State& state) {
  Setup();
  const std::vector<int64_t> sizes{784, 512, 512, 10};
  const int64_t batch = 128;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  };
  Tensor x = Tensor::FromVector<float>(random(batch * sizes[0]), {batch, sizes[0]}, false, "x");
  std::vector<int64_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = i % sizes.back();
  Tensor label = Tensor::FromVector<int64_t>(labels, {batch, 1}, false, "label");
  Tensor lr = Tensor::FromVector<float>({0.01f}, {1}, false, "lr");
  std::vector<Tensor> params;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    params.push_back(Tensor::FromVector<float>(random(sizes[l] * sizes[l + 1]), {sizes[l], sizes[l + 1]}, true,
                                               "w" + std::to_string(l)));
    params.push_back(Tensor::FromVector<float>(random(sizes[l + 1]), {sizes[l + 1]}, true, "b" + std::to_string(l)));
  }
  auto step = [&] {
    Tensor h = x;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      Tensor xw = Call("mul", {{"X", {h}}, {"Y", {params[2 * l]}}})["Out"];
      h = Call("elementwise_add", {{"X", {xw}}, {"Y", {params[2 * l + 1]}}}, {{"axis", 1}})["Out"];
      if (l + 2 < sizes.size()) h = Call("tanh", {{"X", {h}}})["Out"];
    }
    Tensor ce = Call("softmax_with_cross_entropy", {{"Logits", {h}}, {"Label", {label}}})["Loss"];
    Tensor loss = Call("mean", {{"X", {ce}}})["Out"];
    loss.SetName("loss");
    for (auto& p : params) p.ZeroGrad();
    loss.Backward();
    nabla::eager::NoGradGuard no_grad;
    for (auto& p : params)
      nabla::eager::CallInPlace("sgd", {{"Param", {p}}, {"Grad", {p.Grad()}}, {"LearningRate", {lr}}},
                                {{"ParamOut", {p}}});
  };
  if (const char* dir = std::getenv("NABLA_EAGER_BENCH_TRACE")) {
    nabla::eager::Tape tape;
    step();
    tape.Stop();
    std::cerr << "eager_bench: nabla exec " << tape.Save(dir) << " --backward loss --sgd 0.01\n";
  }
  for (auto _ : state) step();
}
BENCHMARK(BM_EagerMlpStep)->Unit(benchmark::kMillisecond);

}  // namespace
