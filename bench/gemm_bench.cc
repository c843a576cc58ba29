// cpu::Gemm on OpenBLAS against oneDNN, the measurements behind the policy
// in backends/cpu/src/blas.cc (GemmLibFor), and the FMA peak of one core that
// compare_torch prints the MLP step's GFLOP/s against:
//  - BM_Gemm/M/N/K/TA/TB/LIB: GFLOPS of one single-threaded product (LIB 0
//    OpenBLAS, 1 oneDNN; cpu::Gemm splits larger work into such calls, one
//    per thread) on the MLP's, the RNN's and square shapes, each
//    transposition the ops use;
//  - BM_DnnlCreate/M/N/K: one oneDNN call whose primitive is in no cache (a
//    new leading dimension each time), so its time less BM_Gemm's is the
//    cost of creating a primitive, what nabla's primitive cache saves;
//  - BM_TileBf16/M/N/K/TA/TB/LD/LDC: flash_attn's bfloat16 tiles on strided
//    against dense operands (below);
//  - BM_FmaPeak: independent vector FMAs on one core (no loads), the fp32
//    limit of the core ("GFLOPS").
//
// Rates are per CPU second of the benchmark thread, not wall time: on the
// shared 2-core host the wall clock mostly measures the other tenants.
//
//   OPENBLAS_CORETYPE=SkylakeX build/bin/gemm_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bench_util.h"
#include "nabla/cpu/cpu.h"

namespace nabla {
namespace {

using bench::RandomFloats;

void SetFlops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOPS"] =
      benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_Gemm(benchmark::State& state) {
  cpu::InitCpuBackend();
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  const auto lib = state.range(5) != 0 ? cpu::GemmLib::kOneDnn : cpu::GemmLib::kOpenBlas;
  if (lib == cpu::GemmLib::kOneDnn && !cpu::OneDnnGemmBuilt()) {
    state.SkipWithError("built without oneDNN");
    return;
  }
  const std::vector<float> a = RandomFloats(m * k, 1), b = RandomFloats(k * n, 2);
  std::vector<float> c(m * n);
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  tbb::task_arena arena(1);
  arena.execute([&] {
    for (auto _ : state) {
      cpu::GemmWith(lib, ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n);
      benchmark::DoNotOptimize(c.data());
    }
  });
  SetFlops(state, 2.0 * m * n * k);
}

// {m, n, k, trans_a, trans_b}: the products of one training step.
const std::vector<std::vector<int64_t>> kShapes = {
    // MLP 784-512-512-10, batch 128 (compare_torch case b): forward X * W,
    // the weight gradients X^T * dY and the input gradients dY * W^T.
    {128, 512, 784, 0, 0},
    {128, 512, 512, 0, 0},
    {128, 10, 512, 0, 0},
    {784, 512, 128, 1, 0},
    {512, 512, 128, 1, 0},
    {512, 10, 128, 1, 0},
    {128, 512, 512, 0, 1},
    {128, 512, 10, 0, 1},
    // The RNN of case c (batch 32, input 64, hidden 128).
    {32, 128, 64, 0, 0},
    {32, 128, 128, 0, 0},
    {128, 128, 32, 1, 0},
    {32, 128, 128, 0, 1},
    // Squares.
    {32, 32, 32, 0, 0},
    {64, 64, 64, 0, 0},
    {96, 96, 96, 0, 0},
    {128, 128, 128, 0, 0},
    {192, 192, 192, 0, 0},
    {256, 256, 256, 0, 0},
    {512, 512, 512, 0, 0},
    {1024, 1024, 1024, 0, 0},
    // B transposed (X @ W^T, mul_grad's dX) below the 1M multiply-adds.
    {32, 32, 32, 0, 1},
    {64, 64, 64, 0, 1},
    {96, 96, 96, 0, 1},
    {32, 128, 64, 0, 1},
    {64, 128, 128, 0, 1},
    // The GPT block of compare_torch (m) at B * T = 1024 tokens, D = 128 and
    // 2048 tokens, D = 256: the linear layers forward (D -> D, D -> 4D, 4D ->
    // D, the logits against the tied embedding, 256 x D), the input gradients
    // dY * W^T and the weight gradients X^T * dY over all tokens.
    {1024, 128, 128, 0, 0},
    {1024, 512, 128, 0, 0},
    {1024, 128, 512, 0, 0},
    {1024, 256, 128, 0, 1},
    {1024, 128, 512, 0, 1},
    {128, 128, 1024, 1, 0},
    {128, 512, 1024, 1, 0},
    {2048, 256, 256, 0, 0},
    {2048, 1024, 256, 0, 0},
    {2048, 256, 1024, 0, 0},
    {2048, 256, 256, 0, 1},
    {2048, 256, 1024, 0, 1},
    {2048, 1024, 256, 0, 1},
    {256, 256, 2048, 1, 0},
    {256, 1024, 2048, 1, 0},
    {1024, 256, 2048, 1, 0},
    {512, 128, 1024, 1, 0},
    // A GPT block of D = 512 over 512 tokens (compare_torch --gpt-sizes
    // 4x128x512x8): the linear layers' forward, dX and dW products (the
    // square forward one is above).
    {512, 2048, 512, 0, 0},
    {512, 512, 2048, 0, 0},
    {512, 512, 512, 0, 1},
    {512, 512, 2048, 0, 1},
    {512, 2048, 512, 0, 1},
    {512, 512, 512, 1, 0},
    {512, 2048, 512, 1, 0},
    {2048, 512, 512, 1, 0},
    // The same with the q, k and v projections as one product of N = 3D
    // (the fusion pass's packed attention): forward, dX over K = 3D and dW.
    {1024, 384, 128, 0, 0},
    {1024, 128, 384, 0, 1},
    {128, 384, 1024, 1, 0},
    {2048, 768, 256, 0, 0},
    {2048, 256, 768, 0, 1},
    {256, 768, 2048, 1, 0},
    // flash_attn's float32 tiles: scores (and dP) q k^T, P v (and dS k), and
    // P^T dO (and dS^T q), at head_dim 32 with T = 64 and head_dim 64 with
    // 128-key tiles.
    {64, 64, 32, 0, 1},
    {64, 32, 64, 0, 0},
    {64, 32, 64, 1, 0},
    {128, 128, 64, 0, 1},
    {128, 64, 128, 0, 0},
    {128, 64, 128, 1, 0},
    // flash_attn's causal bands at head_dim 64: 32 query rows against the
    // 32-128 keys they see (scores and dP, then P v and dS k), and 32 keys'
    // rows of dV and dK over the 32-128 queries that see them.
    {32, 32, 64, 0, 1},
    {32, 64, 64, 0, 1},
    {32, 96, 64, 0, 1},
    {32, 128, 64, 0, 1},
    {32, 64, 32, 0, 0},
    {32, 64, 96, 0, 0},
    {32, 64, 128, 0, 0},
    {32, 64, 32, 1, 0},
    {32, 64, 96, 1, 0},
    {32, 64, 128, 1, 0},
};

void GemmArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "TA", "TB", "LIB"});
  for (const auto& s : kShapes)
    for (int lib : {0, 1}) b->Args({s[0], s[1], s[2], s[3], s[4], lib});
}
BENCHMARK(BM_Gemm)->Apply(GemmArgs);

void BM_DnnlCreate(benchmark::State& state) {
  cpu::InitCpuBackend();
  if (!cpu::OneDnnGemmBuilt()) {
    state.SkipWithError("built without oneDNN");
    return;
  }
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  // More distinct leading dimensions than nabla's cache (64) and oneDNN's own
  // primitive cache (1024 by default) hold: every call creates a primitive.
  constexpr int64_t kSpread = 4096;
  const std::vector<float> a = RandomFloats(m * k, 1), b = RandomFloats(k * n, 2);
  std::vector<float> c(m * (n + kSpread));
  tbb::task_arena arena(1);
  int64_t i = 0;
  arena.execute([&] {
    for (auto _ : state) {
      const int64_t ldc = n + (i++ % kSpread);
      cpu::GemmWith(cpu::GemmLib::kOneDnn, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), ldc);
      benchmark::DoNotOptimize(c.data());
    }
  });
}
BENCHMARK(BM_DnnlCreate)->ArgNames({"M", "N", "K"})->Args({32, 128, 128})->Args({128, 512, 784});

// cpu::GemmBf16 (bfloat16 operands, float32 C written, as the layers' bf16
// products and their gradients under --precision bf16) on the shapes above.
void BM_GemmBf16(benchmark::State& state) {
  cpu::InitCpuBackend();
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  const std::vector<float> af = RandomFloats(m * k, 1), bf = RandomFloats(k * n, 2);
  std::vector<bfloat16> a(af.size()), b(bf.size());
  cpu::ConvertToBf16(af.data(), a.data(), static_cast<int64_t>(af.size()));
  cpu::ConvertToBf16(bf.data(), b.data(), static_cast<int64_t>(bf.size()));
  std::vector<float> c(m * n);
  tbb::task_arena arena(1);
  arena.execute([&] {
    for (auto _ : state) {
      cpu::GemmBf16(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
      benchmark::DoNotOptimize(c.data());
    }
  });
  SetFlops(state, 2.0 * m * n * k);
}
BENCHMARK(BM_GemmBf16)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "TA", "TB"});
  for (const auto& s : kShapes) b->Args({s[0], s[1], s[2], s[3], s[4]});
});

// flash_attn's bfloat16 tile products (cpu::GemmBf16, float32 out) on
// operands whose rows are LD apart: a head's rows in [batch, seq, heads,
// head_dim] are heads * head_dim apart (LD 256 for 4 heads of 64), a packed
// copy has them dense (LD = the row's width). oneDNN takes the product with
// brgemm only when A, B and C are all dense, else with its older gemm:jit.
// C[M,N] += 0.125 op(A) op(B), A's and B's rows LD apart, C's LDC (0: dense).
void BM_TileBf16(benchmark::State& state) {
  cpu::InitCpuBackend();
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2), ld = state.range(5);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  const int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
  const int64_t lda = std::max(ld, acols), ldb = std::max(ld, bcols);
  std::vector<float> af = RandomFloats(arows * lda, 1), bf = RandomFloats(brows * ldb, 2);
  std::vector<bfloat16> a(af.size()), b(bf.size());
  cpu::ConvertToBf16(af.data(), a.data(), static_cast<int64_t>(af.size()));
  cpu::ConvertToBf16(bf.data(), b.data(), static_cast<int64_t>(bf.size()));
  const int64_t ldc = std::max(state.range(6), n);
  std::vector<float> c(m * ldc);
  tbb::task_arena arena(1);
  arena.execute([&] {
    for (auto _ : state) {
      cpu::GemmBf16(ta, tb, m, n, k, 0.125f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), ldc);
      benchmark::DoNotOptimize(c.data());
    }
  });
  SetFlops(state, 2.0 * m * n * k);
}
BENCHMARK(BM_TileBf16)
    ->ArgNames({"M", "N", "K", "TA", "TB", "LD", "LDC"})
    ->Args({128, 128, 64, 0, 1, 256, 0})
    ->Args({128, 128, 64, 0, 1, 64, 0})
    ->Args({128, 64, 128, 0, 0, 256, 256})
    ->Args({128, 64, 128, 0, 0, 64, 0})
    ->Args({128, 64, 128, 1, 0, 256, 256})
    ->Args({128, 64, 128, 1, 0, 64, 0})
    // T = 64 (the GPT's B = 16, 4 heads of 32): scores, P V, P^T dO.
    ->Args({64, 64, 32, 0, 1, 0, 0})
    ->Args({64, 32, 64, 0, 0, 0, 0})
    ->Args({64, 32, 64, 1, 0, 0, 0})
    // The GPT block's linear layers at B * T = 1024, D = 128 (as BM_Gemm's):
    // forward, dX = dY W^T and dW = X^T dY of D -> D, D -> 4D and 4D -> D.
    ->Args({1024, 128, 128, 0, 0, 0, 0})
    ->Args({1024, 128, 128, 0, 1, 0, 0})
    ->Args({128, 128, 1024, 1, 0, 0, 0})
    ->Args({1024, 512, 128, 0, 0, 0, 0})
    ->Args({1024, 128, 512, 0, 1, 0, 0})
    ->Args({128, 512, 1024, 1, 0, 0, 0})
    ->Args({1024, 128, 512, 0, 0, 0, 0})
    ->Args({1024, 512, 128, 0, 1, 0, 0})
    ->Args({512, 128, 1024, 1, 0, 0, 0});

// 12 independent accumulators hide the FMA latency (4 cycles, 2 ports).
constexpr int kAcc = 12;
constexpr int64_t kFmaIters = 1 << 20;

// x and y come from the caller at run time, so the compiler cannot fold the
// loop away.
__attribute__((target("avx512f"))) float FmaLoop512(float xs, float ys) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(xs), y = _mm512_set1_ps(ys);
  for (int64_t it = 0; it < kFmaIters; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, sum);
  return out[0];
}

__attribute__((target("avx2,fma"))) float FmaLoop256(float xs, float ys) {
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 x = _mm256_set1_ps(xs), y = _mm256_set1_ps(ys);
  for (int64_t it = 0; it < kFmaIters; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, sum);
  return out[0];
}

void BM_FmaPeak(benchmark::State& state) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) {
    state.SkipWithError("no FMA instructions");
    return;
  }
  float x = 0.999999f, y = 1e-7f;
  for (auto _ : state) {
    benchmark::DoNotOptimize(x);
    benchmark::DoNotOptimize(y);
    benchmark::DoNotOptimize(avx512 ? FmaLoop512(x, y) : FmaLoop256(x, y));
  }
  state.SetLabel(avx512 ? "avx512" : "avx2");
  SetFlops(state, 2.0 * (avx512 ? 16 : 8) * kAcc * static_cast<double>(kFmaIters));
}
// Wall-clock variant: compare_torch sets it beside the step times it takes
// on the same clock in the same minutes.
BENCHMARK(BM_FmaPeak);
BENCHMARK(BM_FmaPeak)->UseRealTime();

}  // namespace
}  // namespace nabla
