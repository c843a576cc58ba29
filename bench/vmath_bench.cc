// The backend's vector math on one core, the elementwise work of a GPT step
// (bench/compare_torch's B=16, T=64, D=128 block: 1024 tokens):
//  - BM_Gelu/N, BM_GeluGrad/N: gelu (erf form) and its gradient over N
//    floats (524288: the MLP's hidden layer);
//  - BM_LayerNormRows/ROWS/WIDTH, BM_LayerNormGradRows: the rows a
//    layer_norm kernel hands cpu::LayerNormRow(Grad);
//  - BM_ExpShiftedSum/N: a softmax row's exp and sum.
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

void BM_LayerNormRows(benchmark::State& state) {
  const int64_t rows = state.range(0), width = state.range(1);
  const std::vector<float> x = Normal(rows * width, 1), scale = Normal(width, 2), bias = Normal(width, 3);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), var(static_cast<size_t>(rows));
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r)
      nabla::cpu::LayerNormRow(x.data() + r * width, width, scale.data(), bias.data(), 1e-5f, y.data() + r * width,
                               &mean[r], &var[r]);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * width);
}
BENCHMARK(BM_LayerNormRows)->Args({1024, 128})->Args({2048, 256});

void BM_LayerNormGradRows(benchmark::State& state) {
  const int64_t rows = state.range(0), width = state.range(1);
  const std::vector<float> x = Normal(rows * width, 1), dy = Normal(rows * width, 2), scale = Normal(width, 3);
  std::vector<float> dx(x.size()), dscale(static_cast<size_t>(width)), dbias(static_cast<size_t>(width));
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r)
      nabla::cpu::LayerNormGradRow(x.data() + r * width, dy.data() + r * width, width, 0.0f, 1.0f, scale.data(),
                                   dx.data() + r * width, dscale.data(), dbias.data());
    benchmark::DoNotOptimize(dx.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * width);
}
BENCHMARK(BM_LayerNormGradRows)->Args({1024, 128})->Args({2048, 256});

void BM_ExpShiftedSum(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = Normal(n, 1);
  std::vector<float> y(x.size());
  for (auto _ : state) benchmark::DoNotOptimize(nabla::cpu::ExpShiftedSum(x.data(), 4.0f, y.data(), n));
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_ExpShiftedSum)->Arg(256)->Arg(4096);

}  // namespace
