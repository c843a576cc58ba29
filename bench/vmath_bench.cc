// The backend's vector math on one core, the elementwise work of a GPT step
// (bench/compare_torch's B=16, T=64, D=128 block: 1024 tokens):
//  - BM_Gelu/N, BM_GeluGrad/N: gelu (erf form) and its gradient over N
//    floats (524288: the MLP's hidden layer);
//  - BM_LayerNormRows/ROWS/WIDTH, BM_LayerNormGradRows: the rows a
//    layer_norm kernel hands the backend, a call per row and one call
//    (16384 rows of 128: 8 MiB an array, out of the core's caches);
//  - BM_ExpShiftedSum/N: a softmax row's exp and sum;
//  - BM_CausalTile/T: flash_attn's causal tile of T x T scores, row by row
//    and as one rows call.
// Rates are elements per CPU second of the benchmark thread.
//
//   build/bin/vmath_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"

namespace {

std::vector<float> Normal(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

void BM_Gelu(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = Normal(n, 1);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    nabla::cpu::Gelu(x.data(), y.data(), n, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Gelu)->Arg(4096)->Arg(524288);

void BM_GeluGrad(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = Normal(n, 1), dy = Normal(n, 2);
  std::vector<float> dx(x.size());
  for (auto _ : state) {
    nabla::cpu::GeluGrad(x.data(), dy.data(), dx.data(), n, false);
    benchmark::DoNotOptimize(dx.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_GeluGrad)->Arg(4096)->Arg(524288);

// Arg 2: 1 for a LayerNormRow(Grad) call per row, 0 for one LayerNormRows
// call over all of them.
void BM_LayerNormRows(benchmark::State& state) {
  const int64_t rows = state.range(0), width = state.range(1);
  const bool per_row = state.range(2) != 0;
  const std::vector<float> x = Normal(rows * width, 1), scale = Normal(width, 2), bias = Normal(width, 3);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), var(static_cast<size_t>(rows));
  for (auto _ : state) {
    if (per_row)
      for (int64_t r = 0; r < rows; ++r)
        nabla::cpu::LayerNormRow(x.data() + r * width, width, scale.data(), bias.data(), 1e-5f, y.data() + r * width,
                                 &mean[r], &var[r]);
    else
      nabla::cpu::LayerNormRows(x.data(), rows, width, scale.data(), bias.data(), 1e-5f, y.data(), mean.data(),
                                var.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * width);
}
BENCHMARK(BM_LayerNormRows)->ArgNames({"rows", "width", "per_row"})->ArgsProduct({{1024, 16384}, {128}, {1, 0}});
BENCHMARK(BM_LayerNormRows)->ArgNames({"rows", "width", "per_row"})->ArgsProduct({{2048}, {256}, {1, 0}});

void BM_LayerNormGradRows(benchmark::State& state) {
  const int64_t rows = state.range(0), width = state.range(1);
  const bool per_row = state.range(2) != 0;
  const std::vector<float> x = Normal(rows * width, 1), dy = Normal(rows * width, 2), scale = Normal(width, 3);
  const std::vector<float> mean(static_cast<size_t>(rows), 0.0f), rstd(static_cast<size_t>(rows), 1.0f);
  std::vector<float> dx(x.size()), dscale(static_cast<size_t>(width)), dbias(static_cast<size_t>(width));
  for (auto _ : state) {
    if (per_row)
      for (int64_t r = 0; r < rows; ++r)
        nabla::cpu::LayerNormGradRow(x.data() + r * width, dy.data() + r * width, width, 0.0f, 1.0f, scale.data(),
                                     dx.data() + r * width, dscale.data(), dbias.data());
    else
      nabla::cpu::LayerNormGradRows(x.data(), dy.data(), rows, width, mean.data(), rstd.data(), scale.data(), nullptr,
                                    dx.data(), dscale.data(), dbias.data());
    benchmark::DoNotOptimize(dx.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * width);
}
BENCHMARK(BM_LayerNormGradRows)->ArgNames({"rows", "width", "per_row"})->ArgsProduct({{1024, 16384}, {128}, {1, 0}});
BENCHMARK(BM_LayerNormGradRows)->ArgNames({"rows", "width", "per_row"})->ArgsProduct({{2048}, {256}, {1, 0}});

void BM_ExpShiftedSum(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = Normal(n, 1);
  std::vector<float> y(x.size());
  for (auto _ : state) benchmark::DoNotOptimize(nabla::cpu::ExpShiftedSum(x.data(), 4.0f, y.data(), n));
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_ExpShiftedSum)->Arg(256)->Arg(4096);

// A causal tile's softmax numerators as flash_attn takes them, T queries
// against T keys, row r seeing r + 1: each row's max, then exp(x - max) and
// its sum. Arg 1: 1 for RowMax and ExpShiftedSum per row, 0 for one
// RowMaxRows and one ExpShiftedRows call over the tile (the same kernels in
// a loop; rows interleaved in groups measured no faster).
void BM_CausalTile(benchmark::State& state) {
  const int64_t t = state.range(0);
  const bool per_row = state.range(1) != 0;
  const std::vector<float> x = Normal(t * t, 2);
  std::vector<float> y(x.size()), maxes(static_cast<size_t>(t)), sums(static_cast<size_t>(t));
  std::vector<int64_t> lens(static_cast<size_t>(t));
  for (int64_t r = 0; r < t; ++r) lens[r] = r + 1;
  for (auto _ : state) {
    if (per_row) {
      for (int64_t r = 0; r < t; ++r) {
        const float m = nabla::cpu::RowMax(x.data() + r * t, r + 1);
        sums[r] = nabla::cpu::ExpShiftedSum(x.data() + r * t, m, y.data() + r * t, r + 1);
      }
    } else {
      nabla::cpu::RowMaxRows(x.data(), t, t, lens.data(), maxes.data());
      nabla::cpu::ExpShiftedRows(x.data(), t, y.data(), t, t, lens.data(), t, maxes.data(), sums.data());
    }
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetItemsProcessed(state.iterations() * t * (t + 1) / 2);
}
BENCHMARK(BM_CausalTile)->ArgNames({"T", "per_row"})->ArgsProduct({{64, 128}, {1, 0}});

}  // namespace
