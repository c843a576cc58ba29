#pragma once
// Shared by the eager suites: plugins once per process, host copies as doubles.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/eager.h"
#include "nabla/plugin.h"

namespace nabla::eager_testing {

inline void LoadPlugins() {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(MATH_OPS_PLUGIN);
  PluginManager::Instance().Load(NN_OPS_PLUGIN);
}

class EagerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { LoadPlugins(); }
};

inline std::vector<double> Values(const eager::Tensor& t) {
  std::vector<double> out;
  if (t.GetDType() == DType::kFloat64) return t.ToVector<double>();
  for (float v : t.ToVector<float>()) out.push_back(v);
  return out;
}

// |a - b| <= atol + rtol |b| elementwise, with the first offender reported.
inline void ExpectClose(const std::vector<double>& a, const std::vector<double>& b, double rtol, double atol,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::abs(a[i] - b[i]), atol + rtol * std::abs(b[i]))
        << what << "[" << i << "]: " << a[i] << " vs " << b[i];
}

}  // namespace nabla::eager_testing
