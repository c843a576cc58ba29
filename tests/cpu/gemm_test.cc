// cpu::Gemm: OpenBLAS and oneDNN give the reference product (within float32
// rounding) for every transposition, odd and empty shapes, padded leading
// dimensions, alpha and beta, split across a task arena or not; the policy
// picks the library its one-line description names.
#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"

namespace nabla::cpu {
namespace {

struct Case {
  int64_t m, n, k;
};

// Padding of 3 past every row shows both that the leading dimensions are
// honoured and that nothing outside C is written.
constexpr int64_t kPad = 3;
constexpr float kSentinel = 12345.0f;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void CheckProduct(GemmLib lib, bool ta, bool tb, const Case& s, float alpha, float beta, int threads) {
  SCOPED_TRACE(testing::Message() << (lib == GemmLib::kOneDnn ? "onednn" : "openblas") << " " << s.m << "x" << s.n
                                  << "x" << s.k << " ta=" << ta << " tb=" << tb << " alpha=" << alpha
                                  << " beta=" << beta << " threads=" << threads);
  // Stored A is m x k (k x m when transposed), B k x n (n x k).
  const int64_t a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
  const int64_t b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
  const int64_t lda = a_cols + kPad, ldb = b_cols + kPad, ldc = s.n + kPad;
  // One element more than an empty matrix needs, so data() is never null.
  const std::vector<float> a = Random(a_rows * lda + 1, 1), b = Random(b_rows * ldb + 1, 2);
  std::vector<float> c = Random(s.m * ldc + 1, 3);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = s.n; j < ldc; ++j) c[i * ldc + j] = kSentinel;
  if (beta == 0.0f && s.m > 0 && s.n > 0) c[0] = std::numeric_limits<float>::quiet_NaN();  // beta 0 ignores C
  std::vector<double> want(s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < s.k; ++p)
        sum += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      want[i * s.n + j] = alpha * sum + (beta == 0.0f ? 0.0 : beta * static_cast<double>(c[i * ldc + j]));
    }
  tbb::task_arena arena(threads);
  arena.execute(
      [&] { GemmWith(lib, ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc); });
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j)
      ASSERT_NEAR(c[i * ldc + j], want[i * s.n + j], 1e-5 * (s.k + 1)) << "C[" << i << "][" << j << "]";
    for (int64_t j = s.n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], kSentinel) << "padding of row " << i;
  }
}

std::vector<GemmLib> Libs() {
  std::vector<GemmLib> libs{GemmLib::kOpenBlas};
  if (OneDnnGemmBuilt()) libs.push_back(GemmLib::kOneDnn);
  return libs;
}

TEST(CpuGemm, BothLibrariesMatchTheReference) {
  // Odd, skinny and empty shapes; 129 x 65 x 257 is large enough that two
  // threads split it into blocks.
  const Case cases[] = {{1, 1, 1},      {3, 5, 7}, {17, 9, 33}, {1, 31, 2}, {64, 1, 16},
                        {129, 65, 257}, {0, 4, 5}, {4, 0, 5},   {4, 5, 0},  {0, 0, 0}};
  for (GemmLib lib : Libs())
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const Case& s : cases)
          for (int threads : {1, 2}) {
            CheckProduct(lib, ta, tb, s, 1.0f, 0.0f, threads);
            CheckProduct(lib, ta, tb, s, -1.5f, 0.5f, threads);
            CheckProduct(lib, ta, tb, s, 0.25f, 0.5f, threads);  // the same primitive: alpha is read per call
            if (HasFatalFailure()) return;
          }
}

TEST(CpuGemm, DoubleAcceptsEmptyMatrices) {
  std::vector<double> c{7.0, 8.0, kSentinel};
  const double x = 1.0;
  Gemm(false, false, 1, 2, 0, 1.0, &x, 0, &x, 2, 0.5, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{3.5, 4.0, kSentinel}));
  Gemm(false, false, 0, 2, 3, 1.0, &x, 3, &x, 2, 0.0, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{3.5, 4.0, kSentinel}));
}

// GemmBiasAct: C = act(A B + bias). On OpenBLAS the epilogue sees every
// element of C exactly once, right after C's block was computed, with C's
// bits those of Gemm (float32 and float64, whole products and runs of
// rows); on oneDNN (forced: this machine's policy may keep float32 on
// OpenBLAS) bias and activation are its post-ops, within float32 rounding of
// the reference.
struct BiasActCall {
  std::vector<float>* c;
  std::vector<int>* seen;          // per element of C: how many times the epilogue saw it
  const std::vector<float>* gemm;  // Gemm's C, for the bits before the epilogue
  const float* bias;
  GemmAct act;
  int64_t ldc;
  bool bits_ok = true;
  static void Run(void* self, int64_t row, int64_t col, int64_t rows, int64_t cols) {
    auto& e = *static_cast<BiasActCall*>(self);
    for (int64_t i = row; i < row + rows; ++i)
      for (int64_t j = col; j < col + cols; ++j) {
        float& v = (*e.c)[i * e.ldc + j];
        if (std::memcmp(&v, &(*e.gemm)[i * e.ldc + j], sizeof v) != 0) e.bits_ok = false;
        ++(*e.seen)[i * e.ldc + j];
        v += e.bias[j];
        if (e.act == GemmAct::kRelu) v = v < 0 ? 0 : v;
        if (e.act == GemmAct::kTanh) v = std::tanh(v);
        if (e.act == GemmAct::kSigmoid) v = 1 / (1 + std::exp(-v));
      }
  }
};

TEST(CpuGemm, BiasActivationAsPostOps) {
  // 600 x 700 x 40 is one OpenBLAS call per thread; 129 x 65 x 257 splits
  // across two threads by rows, 40 x 300 x 64 by columns.
  const Case cases[] = {{3, 5, 7}, {129, 65, 257}, {40, 300, 64}, {600, 700, 40}, {2, 3, 0}};
  for (GemmLib lib : Libs())
    for (GemmAct act : {GemmAct::kIdentity, GemmAct::kRelu, GemmAct::kTanh, GemmAct::kSigmoid})
      for (const Case& s : cases)
        for (int threads : {1, 2}) {
          SCOPED_TRACE(testing::Message()
                       << (lib == GemmLib::kOneDnn ? "onednn" : "openblas") << " act " << static_cast<int>(act) << " "
                       << s.m << "x" << s.n << "x" << s.k << " threads=" << threads);
          const int64_t lda = s.k + 1, ldb = s.n, ldc = s.n;
          const std::vector<float> a = Random(s.m * lda + 1, 4), b = Random(s.k * ldb + 1, 5), bias = Random(s.n, 6);
          std::vector<float> gemm(s.m * ldc), c(s.m * ldc, std::numeric_limits<float>::quiet_NaN());
          std::vector<int> seen(s.m * ldc, 0);
          BiasActCall call{&c, &seen, &gemm, bias.data(), act, ldc};
          tbb::task_arena arena(threads);
          arena.execute([&] {
            GemmWith(GemmLib::kOpenBlas, false, false, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                     gemm.data(), ldc);
            GemmBiasAct(&lib, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, bias.data(), act, c.data(), ldc,
                        &BiasActCall::Run, &call);
          });
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double want = gemm[i * ldc + j] + static_cast<double>(bias[j]);
              if (act == GemmAct::kRelu) want = std::max(want, 0.0);
              if (act == GemmAct::kTanh) want = std::tanh(want);
              if (act == GemmAct::kSigmoid) want = 1 / (1 + std::exp(-want));
              ASSERT_NEAR(c[i * ldc + j], want, 2e-5 * (s.k + 1)) << "C[" << i << "][" << j << "]";
              if (lib == GemmLib::kOpenBlas) {
                ASSERT_EQ(seen[i * ldc + j], 1) << "C[" << i << "][" << j << "]";
              }
            }
          if (lib == GemmLib::kOpenBlas) {
            EXPECT_TRUE(call.bits_ok) << "C before the epilogue is not Gemm's";
          }
          if (HasFatalFailure()) return;
        }
}

TEST(CpuGemm, BiasActivationInDoubleIsGemmThenEpilogue) {
  const int64_t m = 300, n = 50, k = 30;
  std::vector<double> a(m * k), b(k * n), want(m * n), c(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.1 * static_cast<double>(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.3 * static_cast<double>(i));
  Gemm(false, false, m, n, k, 1.0, a.data(), k, b.data(), n, 0.0, want.data(), n);
  struct Count {
    int64_t elements = 0;
    static void Run(void* self, int64_t, int64_t, int64_t rows, int64_t cols) {
      static_cast<Count*>(self)->elements += rows * cols;
    }
  } count;
  GemmBiasAct(nullptr, m, n, k, a.data(), k, b.data(), n, static_cast<const double*>(nullptr), GemmAct::kIdentity,
              c.data(), n, &Count::Run, &count);
  EXPECT_EQ(count.elements, m * n);
  EXPECT_EQ(std::memcmp(c.data(), want.data(), c.size() * sizeof(double)), 0);
}

// GemmPolicy says "onednn for float32 from NM multiply-adds" on AVX-512
// CPUs; GemmLibFor must pick oneDNN exactly from there.
TEST(CpuGemm, PolicyPicksWhatItSays) {
  unsetenv("NABLA_DNNL");
  const std::string policy = GemmPolicy();
  if (!OneDnnGemmBuilt()) {
    EXPECT_EQ(policy, "openblas for all (no oneDNN)");
    EXPECT_EQ(GemmLibFor(1024, 1024, 1024), GemmLib::kOpenBlas);
    return;
  }
  // Without AVX-512 oneDNN's float32 matmul has no brgemm kernels and
  // OpenBLAS runs every float32 product (the policy says why).
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    EXPECT_EQ(policy, "openblas for float32 (oneDNN has no brgemm kernels for this CPU)");
    EXPECT_EQ(GemmLibFor(1024, 1024, 1024), GemmLib::kOpenBlas);
    EXPECT_EQ(GemmLibFor(128, 512, 784), GemmLib::kOpenBlas);
    return;
  }
  const std::string from = "onednn for float32 from ";
  ASSERT_EQ(policy.rfind(from, 0), 0u) << policy;
  const int64_t mega = std::strtoll(policy.c_str() + from.size(), nullptr, 10);
  ASSERT_GT(mega, 0) << policy;
  EXPECT_NE(policy.find("M multiply-adds, openblas otherwise"), std::string::npos) << policy;
  const int64_t macs = mega * 1024 * 1024;
  EXPECT_EQ(GemmLibFor(1, 1, macs), GemmLib::kOneDnn);
  EXPECT_EQ(GemmLibFor(1, 1, macs - 1), GemmLib::kOpenBlas);
  EXPECT_EQ(GemmLibFor(1024, 1024, 1024), GemmLib::kOneDnn);
  EXPECT_EQ(GemmLibFor(8, 8, 8), GemmLib::kOpenBlas);
  EXPECT_EQ(GemmLibFor(0, 1024, 1024), GemmLib::kOpenBlas);
  // NABLA_DNNL=0 rules oneDNN out, and the description says so.
  setenv("NABLA_DNNL", "0", 1);
  EXPECT_EQ(GemmLibFor(1024, 1024, 1024), GemmLib::kOpenBlas);
  EXPECT_EQ(GemmPolicy(), "openblas for all (NABLA_DNNL=0)");
  unsetenv("NABLA_DNNL");
  EXPECT_EQ(GemmLibFor(1024, 1024, 1024), GemmLib::kOneDnn);
}

size_t ThreadsOfProcess() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// oneDNN runs on OpenMP: a call must not start a team of its own beside the
// task arena's threads (--threads stays the only source of threads).
TEST(CpuGemm, OneDnnStartsNoThreads) {
  if (!OneDnnGemmBuilt()) GTEST_SKIP() << "built without oneDNN";
  const int64_t n = 256;
  const std::vector<float> a = Random(n * n, 1), b = Random(n * n, 2);
  std::vector<float> c(n * n);
  tbb::task_arena one(1);
  const size_t before = ThreadsOfProcess();
  one.execute([&] {
    for (bool ta : {false, true})
      GemmWith(GemmLib::kOneDnn, ta, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  EXPECT_EQ(ThreadsOfProcess(), before);
}

}  // namespace
}  // namespace nabla::cpu
