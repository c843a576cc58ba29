// The CPU backend's vector math against the plain loops it replaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "nabla/cpu/cpu.h"

namespace nabla::cpu {
namespace {

// Bit for bit the left-to-right sum, across the 4-input passes, the leftover
// inputs and the 1024-element blocks (and with -0.0, inf and NaN about).
TEST(SumArrays, AddsInOrderBitForBit) {
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.0f, 1e3f);
  for (int64_t count : {1, 2, 3, 4, 5, 8, 9, 32})
    for (int64_t n : {1, 7, 1023, 1024, 1025, 5000}) {
      std::vector<std::vector<float>> xs(count, std::vector<float>(n));
      for (auto& x : xs)
        for (auto& v : x) v = d(gen);
      xs[0][0] = -0.0f;
      if (count > 2 && n > 3) {
        xs[1][1] = INFINITY;
        xs[2][2] = NAN;
        xs[count - 1][3] = -INFINITY;
      }
      std::vector<const float*> ptrs;
      for (const auto& x : xs) ptrs.push_back(x.data());
      std::vector<float> got(n, 123.0f), want(n);
      for (int64_t i = 0; i < n; ++i) {
        float s = xs[0][i];
        for (int64_t j = 1; j < count; ++j) s += xs[j][i];
        want[i] = s;
      }
      SumArrays(ptrs.data(), count, got.data(), n);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << count << " inputs of " << n;
    }
}

}  // namespace
}  // namespace nabla::cpu
