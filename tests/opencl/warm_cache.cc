// The OpenCL tests' setup fixture: compiles what they use once, so PoCL's
// kernel cache (POCL_CACHE_DIR, in the build tree) is warm before the tests
// run in parallel. A cold cache costs PoCL about 20 s per CLBlast GEMM
// program and precision; this pays it here, under one long
// timeout, instead of inside every test.
#include <chrono>
#include <iostream>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/opencl/opencl.h"

namespace {

template <typename T>
void WarmGemm(nabla::opencl::OpenClDevice& dev, int64_t n) {
  std::vector<T> host(n * n, T(1));
  void* a = dev.Allocate(host.size() * sizeof(T));
  void* c = dev.Allocate(host.size() * sizeof(T));
  dev.CopyFromHost(a, host.data(), host.size() * sizeof(T));
  for (bool ta : {false, true})
    for (bool tb : {false, true}) dev.Gemm(ta, tb, n, n, n, T(1), a, 0, n, a, 0, n, T(0), c, 0, n);
  dev.Synchronize();
  dev.Free(a, host.size() * sizeof(T));
  dev.Free(c, host.size() * sizeof(T));
}

}  // namespace

int main() {
  try {
    nabla::cpu::InitCpuBackend();
    auto& dev = nabla::opencl::GetDevice(0);
    const auto start = std::chrono::steady_clock::now();
    WarmGemm<float>(dev, 32);
    if (dev.Info().fp64) WarmGemm<double>(dev, 8);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "warmed the PoCL kernel cache for " << dev.Name() << " in " << s << " s\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "warm_cache: " << e.what() << "\n";
    return 1;
  }
}
