#pragma once
// Helpers shared by the Google Benchmark programs in bench/.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"

namespace nabla::bench {

// NABLA_BENCH_PLUGINS=FILE[:FILE...]: the plugin files InitRuntime loads
// instead of the standard folder, e.g. the C++ ABI build of the standard op
// files (test_plugins/std_cxx/libstd_cxx_ops.so), which registers the same op
// names as the shipped math_ops and nn_ops (C ABI), so one benchmark times
// either build's dispatch (bench/dispatch_abi).
inline const char* BenchPlugins() {
  const char* env = std::getenv("NABLA_BENCH_PLUGINS");
  return env != nullptr && *env != '\0' ? env : nullptr;
}

// The host backend and the standard plugins from the build tree (or
// NABLA_BENCH_PLUGINS's), once per process (every benchmark calls it first).
inline void InitRuntime() {
  cpu::InitCpuBackend();
  static const bool loaded = [] {
    const char* files = BenchPlugins();
    if (files == nullptr) {
      PluginManager::Instance().LoadDefaults();
      return true;
    }
    const std::string list = files;
    for (size_t begin = 0; begin <= list.size();) {
      size_t end = list.find(':', begin);
      if (end == std::string::npos) end = list.size();
      if (end > begin) PluginManager::Instance().Load(list.substr(begin, end - begin));
      begin = end + 1;
    }
    return true;
  }();
  (void)loaded;
}

// What a per-op benchmark's label names as the plugins it ran.
inline std::string PluginsLabel() {
  const char* files = BenchPlugins();
  return files == nullptr ? std::string("standard plugins") : StrCat("NABLA_BENCH_PLUGINS=", files);
}

// n floats uniform in [-1, 1), the same for the same seed.
inline std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Reports the rate of an n x n x n GEMM per iteration as GFLOPS.
inline void SetGemmFlops(benchmark::State& state, int64_t n) {
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Sets var `name` of `scope` to `data` (host memory of `dtype` and `shape`),
// placed on `device`.
inline void SetTensor(Scope& scope, const std::string& name, DType dtype, const Shape& shape, const void* data,
                      Device& device) {
  Tensor host;
  void* p = host.Allocate(HostDevice(), dtype, shape);
  std::memcpy(p, data, host.Bytes());
  scope.Var(name)->GetTensor().CopyFrom(host, device);
}

}  // namespace nabla::bench
