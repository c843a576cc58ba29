// bfloat16 mixed precision: the conversions and GEMM of the cpu backend, the
// program pass (where the casts go), parity with PyTorch's bf16 autocast
// (references from tests/bf16/bf16_reference.py), and `nabla run` with
// `precision: bf16` (float32 checkpoints, the fallback line, bad values).
#include <gtest/gtest.h>
#include <tbb/task_arena.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/fusion.h"
#include "nabla/mixed_precision.h"
#include "nabla/npy.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "nabla/train/checkpoint.h"
#include "train/run_util.h"

namespace fs = std::filesystem;

namespace nabla {
namespace {

uint16_t Bits(float f) { return FloatToBf16(f).bits; }

TEST(Bf16Conversion, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(Bits(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(bfloat16{0x3f80}), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(Bits(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(Bits(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(Bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above halfway: up
  EXPECT_EQ(Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(Bits(-0.0f), 0x8000);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(nan))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(-nan))));
  EXPECT_EQ(Bits(3.4e38f), 0x7f80);  // the largest floats round up to infinity, as in PyTorch
}

TEST(Bf16Conversion, VectorizedMatchesScalar) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> x(1000);
  for (auto& v : x) {
    const uint32_t u = bits(gen);
    std::memcpy(&v, &u, sizeof v);  // every float, NaNs and denormals included
  }
  std::vector<bfloat16> y(x.size());
  cpu::ConvertToBf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  cpu::ConvertFromBf16(y.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i].bits, Bits(x[i])) << "element " << i;
    const float want = Bf16ToFloat(y[i]);
    ASSERT_TRUE(std::memcmp(&back[i], &want, sizeof want) == 0) << "element " << i;
  }
}

// The AVX512-BF16 path reads denormals as zero; blocks holding one, and the
// tail, must still give FloatToBf16's bits. Every length up to three blocks,
// with one denormal (or none) at every position of a 96-element source.
TEST(Bf16Conversion, DenormalsAndTailsMatchScalar) {
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + 0.37f * static_cast<float>(i));
  const float denormals[] = {1e-40f, -3e-39f, std::numeric_limits<float>::denorm_min()};
  for (int where = -1; where < static_cast<int>(x.size()); ++where) {
    std::vector<float> v = x;
    if (where >= 0) v[where] = denormals[where % 3];
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{64}, size_t{95}, size_t{96}}) {
      std::vector<bfloat16> y(n);
      cpu::ConvertToBf16(v.data(), y.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i].bits, Bits(v[i])) << "n=" << n << " denormal at " << where << ", element " << i;
    }
  }
}

// GemmBf16 against the float32 GEMM of the same (bf16-rounded) operands:
// both accumulate in float32, so only summation order differs. The larger
// shapes split into blocks of rows or of columns on a 2-thread arena. On a
// CPU without bf16 instructions this checks the widened float32 fallback.
TEST(GemmBf16, MatchesFloat32OnRoundedOperands) {
  if (!cpu::OneDnnGemmBuilt()) GTEST_SKIP() << "built without oneDNN";
  cpu::InitCpuBackend();
  std::mt19937 gen(3);
  std::normal_distribution<float> d;
  tbb::task_arena two(2);
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape shape : {Shape{33, 17, 70}, Shape{200, 40, 300}, Shape{40, 200, 300}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        two.execute([&] {
          SCOPED_TRACE(testing::Message()
                       << shape.m << "x" << shape.n << "x" << shape.k << " ta=" << ta << " tb=" << tb);
          const int64_t m = shape.m, n = shape.n, k = shape.k;
          std::vector<float> a(m * k), b(k * n), c0(m * n);
          for (auto* v : {&a, &b, &c0})
            for (auto& x : *v) x = Bf16ToFloat(FloatToBf16(d(gen)));
          std::vector<bfloat16> ab(a.size()), bb(b.size());
          cpu::ConvertToBf16(a.data(), ab.data(), static_cast<int64_t>(a.size()));
          cpu::ConvertToBf16(b.data(), bb.data(), static_cast<int64_t>(b.size()));
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          std::vector<float> want = c0, got = c0;
          // Two factors through one cached primitive: alpha is read per call.
          for (float alpha : {0.5f, -0.25f}) {
            cpu::Gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, 2.0f, want.data(), n);
            cpu::GemmBf16(ta, tb, m, n, k, alpha, ab.data(), lda, bb.data(), ldb, 2.0f, got.data(), n);
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::abs(want[i]))) << "alpha " << alpha;
          }
          // C a block of a wider matrix (ldc > n), alpha and beta: where
          // oneDNN offers only its reference kernel for that, the product
          // goes through dense scratch; either way the columns past n stay.
          const int64_t ldc = n + 5;
          std::vector<float> wide_want(m * ldc, 7.0f), wide_got(m * ldc, 7.0f);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) wide_want[i * ldc + j] = wide_got[i * ldc + j] = c0[i * n + j];
          cpu::Gemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, -1.0f, wide_want.data(), ldc);
          cpu::GemmBf16(ta, tb, m, n, k, 0.75f, ab.data(), lda, bb.data(), ldb, -1.0f, wide_got.data(), ldc);
          for (size_t i = 0; i < wide_want.size(); ++i)
            ASSERT_NEAR(wide_got[i], wide_want[i], 1e-4f * (1 + std::abs(wide_want[i]))) << "strided C, " << i;
          std::vector<bfloat16> low(m * n);
          cpu::GemmBf16(ta, tb, m, n, k, 1.0f, ab.data(), lda, bb.data(), ldb, low.data(), n);
          cpu::Gemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, want.data(), n);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(Bf16ToFloat(low[i]), want[i], 1e-2f * (1e-2f + std::abs(want[i]))) << i;
          // A bfloat16 C inside a wider one (with AMX: computed dense, then
          // rounded into its rows).
          const bfloat16 fence = FloatToBf16(7.0f);
          std::vector<bfloat16> wide_low(m * ldc, fence);
          cpu::GemmBf16(ta, tb, m, n, k, 1.0f, ab.data(), lda, bb.data(), ldb, wide_low.data(), ldc);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const float got_ij = Bf16ToFloat(wide_low[i * ldc + j]);
              if (j < n)
                ASSERT_NEAR(got_ij, want[i * n + j], 1e-2f * (1e-2f + std::abs(want[i * n + j])))
                    << "strided bf16 C at " << i << "," << j;
              else
                ASSERT_EQ(got_ij, 7.0f) << "past n, row " << i;
            }
        });
}

// Small products (flash_attn's tiles) run on the backend's own AVX512-BF16
// kernels where the CPU has them (AMX tiles where it has those; ctest runs
// this suite again with NABLA_AMX=0 for the others): every edge of their
// blocking (6 rows, 16 and 64 columns, pairs of k, an odd k; AMX's 32-row,
// 32-column and 32-element blocks), strided operands and C, each
// transpose. Operands sit in vectors of their exact size, so a read past one
// is an ASan failure; C beyond n and a beta = 0 C full of NaN show what is
// written and read. Against float64 sums of the exact bf16 products.
TEST(GemmBf16, SmallProductsAtEveryEdgeOfTheBlocking) {
  if (!cpu::OneDnnGemmBuilt()) GTEST_SKIP() << "built without oneDNN";
  cpu::InitCpuBackend();
  std::mt19937 gen(5);
  std::normal_distribution<float> d;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t m : {1, 6, 7, 13, 33, 64})
    for (int64_t n : {1, 16, 17, 32, 63, 80})
      for (int64_t k : {1, 2, 3, 32, 71, 128})
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb);
          const int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
          const int64_t lda = acols + (m % 2), ldb = bcols + 3, ldc = n + 2;
          std::vector<bfloat16> a(arows * lda - (lda - acols)), b(brows * ldb - (ldb - bcols));
          for (auto& x : a) x = FloatToBf16(d(gen));
          for (auto& x : b) x = FloatToBf16(d(gen));
          auto at = [&](int64_t i, int64_t p) { return Bf16ToFloat(ta ? a[p * lda + i] : a[i * lda + p]); };
          auto bt = [&](int64_t p, int64_t j) { return Bf16ToFloat(tb ? b[j * ldb + p] : b[p * ldb + j]); };
          std::vector<float> c0(m * ldc);
          for (auto& x : c0) x = d(gen);
          // alpha 1 with beta 0 or 1: the AMX kernel's blocks inside C go
          // to and from C's own tiles.
          for (auto [alpha, beta] :
               {std::pair{0.5f, 0.0f}, std::pair{0.5f, -1.5f}, std::pair{1.0f, 0.0f}, std::pair{1.0f, 1.0f}}) {
            std::vector<float> c = c0;
            if (beta == 0.0f)
              for (int64_t i = 0; i < m; ++i) std::fill_n(c.begin() + i * ldc, n, nan);
            cpu::GemmBf16(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                double sum = 0, mag = 0;
                for (int64_t p = 0; p < k; ++p) {
                  sum += static_cast<double>(at(i, p)) * bt(p, j);
                  mag += std::abs(static_cast<double>(at(i, p)) * bt(p, j));
                }
                const double want = alpha * sum + beta * static_cast<double>(c0[i * ldc + j]);
                ASSERT_NEAR(c[i * ldc + j], want, 1e-6 * (k + 2) * (mag + std::abs(want)) + 1e-30)
                    << "alpha " << alpha << " beta " << beta << " at " << i << "," << j;
              }
              for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "past n, row " << i;
            }
          }
        }
}

// ---------------------------------------------------------------- the pass

class Bf16Pass : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
  }
  static ProgramDesc Mlp() {
    return ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 8], dtype: float32, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64}
      w1: {shape: [8, 4], dtype: float32, persistable: true}
      w2: {shape: [4, 3], dtype: float32, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [h]}}
      - {type: tanh, inputs: {X: [h]}, outputs: {Out: [t]}}
      - {type: mul, inputs: {X: [t], Y: [w2]}, outputs: {Out: [logits]}}
      - {type: mul, inputs: {X: [t], Y: [w2]}, outputs: {Out: [logits2]}}
      - {type: elementwise_add, inputs: {X: [logits], Y: [logits2]}, outputs: {Out: [z]}}
      - type: softmax_with_cross_entropy
        inputs: {Logits: [z], Label: [label]}
        outputs: {Softmax: [prob], Loss: [ce]}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)",
                        "mlp.yaml");
  }
  // "type(inputs->outputs)" per op of block 0, for readable failures.
  static std::vector<std::string> Ops(const ProgramDesc& p) {
    std::vector<std::string> out;
    for (const auto& op : p.Root()->AllOps()) {
      std::string s = op->Type() + "(";
      for (const auto& n : op->InputArgumentNames()) s += n + " ";
      s += "->";
      for (const auto& n : op->OutputArgumentNames()) s += " " + n;
      out.push_back(s + ")");
    }
    return out;
  }
  static DType DTypeOf(const ProgramDesc& p, const std::string& var) { return p.Root()->FindVar(var)->GetDType(); }
};

TEST_F(Bf16Pass, CastsAroundEveryLowPrecisionOpOnly) {
  ProgramDesc p = Mlp();
  MixedPrecisionStats s = ApplyBf16MixedPrecision(p);
  EXPECT_EQ(s.low_ops, 3u);
  EXPECT_EQ(s.casts, 9u);  // two inputs and one output per mul
  const std::vector<std::string> got = Ops(p);
  ASSERT_EQ(got.size(), 16u) << ::testing::PrintToString(got);
  EXPECT_EQ(got[0], "cast(x -> x@BF16@0)");
  EXPECT_EQ(got[1], "cast(w1 -> w1@BF16@1)");
  EXPECT_EQ(got[2], "mul(x@BF16@0 w1@BF16@1 -> h@BF16)");
  EXPECT_EQ(got[3], "cast(h@BF16 -> h)");
  EXPECT_EQ(got[4], "tanh(h -> t)");
  // The second and third mul read t and w2 through casts of their own.
  EXPECT_EQ(got[5], "cast(t -> t@BF16@2)");
  EXPECT_EQ(got[6], "cast(w2 -> w2@BF16@3)");
  EXPECT_EQ(got[7], "mul(t@BF16@2 w2@BF16@3 -> logits@BF16)");
  EXPECT_EQ(got[8], "cast(logits@BF16 -> logits)");
  EXPECT_EQ(got[9], "cast(t -> t@BF16@4)");
  EXPECT_EQ(got[10], "cast(w2 -> w2@BF16@5)");
  EXPECT_EQ(got[12], "cast(logits2@BF16 -> logits2)");
  EXPECT_EQ(got[13], "elementwise_add(logits logits2 -> z)");
  EXPECT_EQ(got[14].rfind("softmax_with_cross_entropy(label z -> ", 0), 0u) << got[14];
  EXPECT_EQ(got[15], "mean(ce -> loss)");
  EXPECT_EQ(DTypeOf(p, "x@BF16@0"), DType::kBFloat16);
  EXPECT_EQ(DTypeOf(p, "h@BF16"), DType::kBFloat16);
  EXPECT_TRUE(p.Root()->FindVar("x@BF16@0")->StopGradient());  // x needs no gradient, nor does its cast
  EXPECT_FALSE(p.Root()->FindVar("w1@BF16@1")->Persistable());
  EXPECT_EQ(DTypeOf(p, "h"), DType::kFloat32);
  EXPECT_EQ(ApplyBf16MixedPrecision(p).casts, 0u);  // idempotent
  EXPECT_EQ(Ops(p).size(), 16u);
}

// flash_attn is GEMM-bound (kLow): q, k, v and the mask go in as bfloat16,
// out comes back through a cast, and softmax_lse, which its inference keeps
// float32, is written as it is: no rounding to 8 bits, no cast.
TEST_F(Bf16Pass, FlashAttnKeepsSoftmaxLseFloat32) {
  if (!CurrentRegistry()->FindKernel("flash_attn", DeviceType::kCPU, DType::kBFloat16))
    GTEST_SKIP() << "no bfloat16 flash_attn kernel";
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      q: {shape: [-1, 6, 2, 4], dtype: float32}
      k: {shape: [-1, 6, 2, 4], dtype: float32}
      v: {shape: [-1, 6, 2, 4], dtype: float32}
      mask: {shape: [6, 6], dtype: float32, stop_gradient: true}
    ops:
      - {type: flash_attn, inputs: {q: [q], k: [k], v: [v], attn_mask: [mask]}, outputs: {out: [out], softmax_lse: [lse]}}
      - {type: mean, inputs: {X: [out]}, outputs: {Out: [loss]}}
)",
                               "attention.yaml");
  const MixedPrecisionStats s = ApplyBf16MixedPrecision(p);
  EXPECT_EQ(s.low_ops, 1u);
  EXPECT_EQ(s.casts, 5u);
  const std::vector<std::string> got = Ops(p);
  ASSERT_EQ(got.size(), 7u) << ::testing::PrintToString(got);
  EXPECT_EQ(got[4], "flash_attn(mask@BF16@0 k@BF16@1 q@BF16@2 v@BF16@3 -> out@BF16 lse)") << got[4];
  EXPECT_EQ(got[5], "cast(out@BF16 -> out)");
  EXPECT_EQ(DTypeOf(p, "lse"), DType::kFloat32);
  EXPECT_EQ(DTypeOf(p, "out@BF16"), DType::kBFloat16);
  EXPECT_FALSE(p.Root()->HasVar("lse@BF16"));
  EXPECT_EQ(ApplyBf16MixedPrecision(p).casts, 0u);  // idempotent
}

// After the backward part, flash_attn_grad writes q's, k's and v's
// gradients in float32 itself: their three widening casts fold away.
TEST_F(Bf16Pass, FlashAttnGradientsWriteFloat32AfterTheFold) {
  if (!CurrentRegistry()->FindKernel("flash_attn_grad", DeviceType::kCPU, DType::kBFloat16))
    GTEST_SKIP() << "no bfloat16 flash_attn_grad kernel";
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      q: {shape: [2, 6, 2, 4], dtype: float32, persistable: true}
      k: {shape: [2, 6, 2, 4], dtype: float32, persistable: true}
      v: {shape: [2, 6, 2, 4], dtype: float32, persistable: true}
    ops:
      - {type: flash_attn, inputs: {q: [q], k: [k], v: [v]}, outputs: {out: [out], softmax_lse: [lse]}, attrs: {causal: true}}
      - {type: mean, inputs: {X: [out]}, outputs: {Out: [loss]}}
)",
                               "attention.yaml");
  ApplyBf16MixedPrecision(p);
  const ParamGrads pg = AppendBackward(p, "loss", {}, {});
  EXPECT_EQ(FoldBf16Casts(p), 3u);
  const OpDesc* grad = nullptr;
  for (const auto& op : p.Root()->AllOps())
    if (op->Type() == "flash_attn_grad") grad = op.get();
  ASSERT_NE(grad, nullptr) << ::testing::PrintToString(Ops(p));
  EXPECT_TRUE(grad->Attr<bool>(kForceFp32OutputAttr));
  InferProgram(p);
  VerifyProgram(p, *CurrentRegistry());
  ASSERT_EQ(pg.size(), 3u);
  for (const auto& [param, g] : pg) EXPECT_EQ(DTypeOf(p, g), DType::kFloat32) << g;
  for (const auto& out : grad->OutputArgumentNames()) EXPECT_EQ(DTypeOf(p, out), DType::kFloat32) << out;
  EXPECT_EQ(FoldBf16Casts(p), 0u);  // idempotent
}

TEST_F(Bf16Pass, GradientsReachTheParametersInFloat32) {
  ProgramDesc p = Mlp();
  ApplyBf16MixedPrecision(p);
  ParamGrads pg = AppendBackward(p, "loss", {}, {});
  ASSERT_EQ(pg.size(), 2u);
  InferProgram(p);
  for (const auto& [param, grad] : pg) {
    EXPECT_EQ(DTypeOf(p, param), DType::kFloat32) << param;
    EXPECT_EQ(DTypeOf(p, grad), DType::kFloat32) << grad;
  }
  // w2 feeds two muls: two bf16 gradients, each cast to float32, summed in float32.
  int casts_to_f32 = 0, sums = 0;
  for (const auto& op : p.Root()->AllOps()) {
    if (op->Type() == "cast" && op->Attr<std::string>("out_dtype") == "float32") ++casts_to_f32;
    if (op->Type() == "sum") {
      ++sums;
      for (const auto& in : op->Input("X")) EXPECT_EQ(DTypeOf(p, in), DType::kFloat32) << in;
    }
    if (op->Type() == "mul_grad") {
      EXPECT_EQ(DTypeOf(p, op->Input("Out@GRAD")[0]), DType::kBFloat16);
    }
  }
  EXPECT_EQ(casts_to_f32, 3 + 5);  // forward outputs; backward: w1, t (twice), w2 (twice)
  EXPECT_GE(sums, 2);              // t@GRAD and w2@GRAD
  // No gradient of x: its cast is stop_gradient, so the first mul_grad skips X@GRAD.
  EXPECT_EQ(p.Root()->FindVar("x@GRAD"), nullptr);
}

// Forward results stay rounded to bfloat16 as in PyTorch's autocast (batch
// norms after a convolution amplify any difference); gradients need not be.
TEST_F(Bf16Pass, GemmGradientsWriteFloat32AfterTheFold) {
  ProgramDesc p = Mlp();
  ApplyBf16MixedPrecision(p);
  const ParamGrads pg = AppendBackward(p, "loss", {}, {});
  // The 5 gradient casts: w1, t twice, w2 twice. The forward's 3 stay. And
  // the second narrowing casts of t and of w2 (each read by two muls): the
  // gradients built, one copy of each serves both.
  EXPECT_EQ(FoldBf16Casts(p), 7u);
  int grads = 0, widening = 0;
  std::map<std::string, std::string> narrowed;  // float32 var -> its bfloat16 copy
  std::vector<std::vector<std::string>> mul_inputs;
  for (const auto& op : p.Root()->AllOps()) {
    if (op->Type() == "cast" && op->Attr<std::string>("out_dtype") == "float32") ++widening;
    if (op->Type() == "cast" && op->Attr<std::string>("out_dtype") == "bfloat16") {
      EXPECT_TRUE(narrowed.emplace(op->Input("X")[0], op->Output("Out")[0]).second)
          << op->Input("X")[0] << " is cast twice: " << ::testing::PrintToString(Ops(p));
    }
    if (op->Type() == "mul") mul_inputs.push_back(op->InputArgumentNames());
    if (op->Type() == "mul") {
      EXPECT_FALSE(op->HasAttr(kForceFp32OutputAttr));
    }
    if (op->Type() != "mul_grad") continue;
    ++grads;
    EXPECT_TRUE(op->Attr<bool>(kForceFp32OutputAttr));
    for (const auto& out : op->OutputArgumentNames()) {
      if (out != kEmptyVarName) {
        EXPECT_EQ(out.find("@BF16"), std::string::npos) << "mul_grad writes " << out;
      }
    }
  }
  EXPECT_EQ(grads, 3);
  EXPECT_EQ(widening, 3) << ::testing::PrintToString(Ops(p));
  for (const char* v : {"x", "w1", "t", "w2"}) EXPECT_EQ(narrowed.count(v), 1u) << v;  // and the gradients'
  ASSERT_EQ(mul_inputs.size(), 3u);
  EXPECT_EQ(mul_inputs[1], mul_inputs[2]);   // both read t's and w2's one copy
  for (const auto& op : p.Root()->AllOps())  // and so do their grad ops
    if (op->Type() == "mul_grad" && op->Input("X")[0] != narrowed.at("x")) {
      EXPECT_EQ(op->Input("X")[0], narrowed.at("t"));
      EXPECT_EQ(op->Input("Y")[0], narrowed.at("w2"));
    }
  EXPECT_FALSE(p.Root()->HasVar("w1@BF16@1@GRAD"));
  // Inference reads the attribute: the gradients stay float32.
  InferProgram(p);
  VerifyProgram(p, *CurrentRegistry());
  for (const auto& [param, grad] : pg) EXPECT_EQ(DTypeOf(p, grad), DType::kFloat32) << grad;
  EXPECT_EQ(FoldBf16Casts(p), 0u);  // idempotent
}

// After the fold, t's two float32 gradient parts (from the two bf16
// mul_grads reading it) are chained through AccumulateX, as in float32,
// with the same values as the sum.
TEST_F(Bf16Pass, FoldedInputGradientsChainInPlace) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  ProgramDesc p = Mlp();
  ApplyBf16MixedPrecision(p);
  AppendBackward(p, "loss", {}, {});
  FoldBf16Casts(p);
  InferProgram(p);
  ProgramDesc fused = p;
  FuseGradOps(fused, {"loss"});
  VerifyProgram(fused, *CurrentRegistry());
  std::vector<const OpDesc*> chain;
  for (const auto& op : fused.Root()->AllOps())
    if (op->Type() == "mul_grad" && op->HasOutput("X@GRAD") &&
        op->Output("X@GRAD") == std::vector<std::string>{"t@GRAD"})
      chain.push_back(op.get());
  ASSERT_EQ(chain.size(), 2u) << ::testing::PrintToString(Ops(fused));
  EXPECT_FALSE(chain[0]->HasInput("AccumulateX"));
  EXPECT_EQ(chain[1]->Input("AccumulateX"), std::vector<std::string>{"t@GRAD"});
  auto run = [](const ProgramDesc& prog) {
    Scope scope;
    std::mt19937 gen(9);
    std::normal_distribution<float> d;
    float* x = scope.Var("x")->GetTensor().Allocate<float>(HostDevice(), {6, 8});
    for (int i = 0; i < 48; ++i) x[i] = d(gen);
    int64_t* label = scope.Var("label")->GetTensor().Allocate<int64_t>(HostDevice(), {6, 1});
    for (int i = 0; i < 6; ++i) label[i] = i % 3;
    for (const auto& [w, shape] : std::vector<std::pair<std::string, Shape>>{{"w1", {8, 4}}, {"w2", {4, 3}}}) {
      float* v = scope.Var(w)->GetTensor().Allocate<float>(HostDevice(), shape);
      for (int64_t i = 0; i < shape[0] * shape[1]; ++i) v[i] = 0.5f * d(gen);
    }
    CreateExecutor("sequential", HostDevice())->Run(prog, 0, scope);
    std::map<std::string, std::vector<float>> out;
    for (const char* n : {"w1@GRAD", "w2@GRAD", "t@GRAD"}) {
      const Tensor& t = scope.FindVar(n)->GetTensor();
      out[n].assign(t.Data<float>(), t.Data<float>() + t.Numel());
    }
    return out;
  };
  cpu::InitCpuBackend();
  const auto want = run(p), got = run(fused);
  for (const auto& [name, values] : want) {
    ASSERT_EQ(got.at(name).size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(got.at(name)[i], values[i], 1e-6f * (1 + std::abs(values[i]))) << name << " " << i;
  }
}

TEST_F(Bf16Pass, FoldsOnlyWhereTheCastIsTheOnlyReader) {
  ProgramDesc p = Mlp();
  ApplyBf16MixedPrecision(p);
  AppendBackward(p, "loss", {}, {});
  // Something else reads the first mul_grad's bfloat16 gradient: that grad op keeps it.
  ASSERT_TRUE(p.Root()->HasVar("w1@BF16@1@GRAD"));
  p.Root()->Var("g_twice")->SetDType(DType::kBFloat16);
  p.Root()->AppendOp(
      OpDesc("elementwise_add", {{"X", {"w1@BF16@1@GRAD"}}, {"Y", {"w1@BF16@1@GRAD"}}}, {{"Out", {"g_twice"}}}, {}));
  EXPECT_EQ(FoldBf16Casts(p), 6u);  // 4 gradient casts, and the second narrowing casts of t and w2
  std::vector<bool> forced;
  for (const auto& op : p.Root()->AllOps())
    if (op->Type() == "mul_grad") forced.push_back(op->Attr<bool>(kForceFp32OutputAttr));
  EXPECT_EQ(forced, (std::vector<bool>{true, true, false}));  // backward order: the first mul's grad is last
  EXPECT_TRUE(p.Root()->HasVar("w1@BF16@1@GRAD"));
}

// A float32 op (softmax) reads the user's bfloat16 var through a cast back to
// float32, and what follows it is float32 too: load-time inference had made
// y and loss bfloat16, which left mean reading y through a cast that failed
// at run time and the loss seed without a kernel.
TEST_F(Bf16Pass, Float32OpsReadBf16VarsThroughACast) {
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
    ops:
      - {type: cast, inputs: {X: [x]}, outputs: {Out: [xb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: softmax, inputs: {X: [xb]}, outputs: {Out: [y]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
)",
                               "user_cast.yaml");
  ASSERT_EQ(DTypeOf(p, "loss"), DType::kBFloat16);  // as loaded
  EXPECT_EQ(ApplyBf16MixedPrecision(p).casts, 1u);
  EXPECT_EQ(DTypeOf(p, "y"), DType::kFloat32);
  EXPECT_EQ(DTypeOf(p, "loss"), DType::kFloat32);
  const std::vector<std::string> got = Ops(p);
  ASSERT_EQ(got.size(), 4u) << ::testing::PrintToString(got);
  EXPECT_EQ(got[1], "cast(xb -> xb@FP32)");
  EXPECT_EQ(got[2], "softmax(xb@FP32 -> y)");
  EXPECT_EQ(got[3], "mean(y -> loss)");
  AppendBackward(p, "loss", {"x"}, {});
  VerifyProgram(p, *CurrentRegistry());
  cpu::InitCpuBackend();
  Scope scope;
  float* x = scope.Var("x")->GetTensor().Allocate<float>(HostDevice(), {2, 3});
  for (int i = 0; i < 6; ++i) x[i] = static_cast<float>(i);
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  // Each softmax row sums to 1: the mean of 6 entries is 1/3.
  EXPECT_NEAR(scope.FindVar("loss")->GetTensor().Data<float>()[0], 1.0f / 3.0f, 1e-6f);
  EXPECT_EQ(scope.FindVar("x@GRAD")->GetTensor().GetDType(), DType::kFloat32);
}

// A no-grad weight's cast gets no gradient (no GEMM for it), and the grad op
// that would have written one still folds, so its other gradient is written
// in float32 (unfolded, it was rounded to bfloat16).
TEST_F(Bf16Pass, NoGradWeightCostsNoGemmAndKeepsTheFold) {
  ProgramDesc p = Mlp();
  ApplyBf16MixedPrecision(p);
  AppendBackward(p, "loss", {}, {"w2"});
  FoldBf16Casts(p);
  int grads = 0;
  for (const auto& op : p.Root()->AllOps()) {
    if (op->Type() != "mul_grad") continue;
    ++grads;
    EXPECT_TRUE(op->Attr<bool>(kForceFp32OutputAttr)) << ::testing::PrintToString(Ops(p));
    if (op->Input("Y")[0].rfind("w2", 0) == 0) {
      EXPECT_EQ(op->Output("Y@GRAD")[0], kEmptyVarName);
    }
  }
  EXPECT_EQ(grads, 3);
  for (const auto& v : p.Root()->AllVars()) {
    const bool w2_cast_grad = v->Name().rfind("w2@BF16", 0) == 0 && v->Name().find("@GRAD") != std::string::npos;
    EXPECT_FALSE(w2_cast_grad) << v->Name();
  }
}

TEST_F(Bf16Pass, OpsDeclareTheirPrecision) {
  const OpRegistry& r = *CurrentRegistry();
  for (const char* op : {"mul", "matmul", "conv2d", "flash_attn"}) {
    EXPECT_EQ(r.Get(op).traits.precision, OpPrecision::kLow) << op;
    EXPECT_NE(r.FindKernel(op, DeviceType::kCPU, DType::kBFloat16), nullptr) << op;
    EXPECT_NE(r.FindKernel(std::string(op) + "_grad", DeviceType::kCPU, DType::kBFloat16), nullptr) << op;
  }
  for (const char* op : {"mean", "reduce_sum", "reduce_mean", "softmax", "log_softmax", "softmax_with_cross_entropy",
                         "cross_entropy", "layer_norm", "batch_norm", "sgd", "momentum", "adam"})
    EXPECT_EQ(r.Get(op).traits.precision, OpPrecision::kFloat32) << op;
  EXPECT_EQ(r.Get("relu").traits.precision, OpPrecision::kFollowInputs);
  // The bias and activation between two GEMMs (ElideBf16Casts), declared
  // through the C ABI (version 8).
  EXPECT_EQ(r.Get("fused_elemwise_activation").traits.precision, OpPrecision::kFollowInputs);
  EXPECT_EQ(r.Get("fused_elemwise_activation").traits.bf16_float32_inputs, std::vector<std::string>{"Y"});
  EXPECT_EQ(r.Get("fused_elemwise_activation_grad").traits.bf16_float32_inputs,
            (std::vector<std::string>{"Y", "Out@GRAD"}));
}

// ElideBf16Casts leaves an op where a var between the casts has another
// use: kept (a fetch), read by a float32 op, or the op's input not the
// output of a widening cast.
TEST_F(Bf16Pass, ElideLeavesOpsWhoseVarsHaveOtherUses) {
  auto program = [](const std::string& after) {
    return ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [4, 8], dtype: float32}
      w1: {shape: [8, 6], dtype: float32, persistable: true}
      b: {shape: [6], dtype: float32, persistable: true}
      w2: {shape: [6, 3], dtype: float32, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [h]}}
      - {type: fused_elemwise_activation, inputs: {X: [h], Y: [b]}, outputs: {Out: [t]}, attrs: {functor_list: [relu, elementwise_add]}}
)" + after,
                        "bias_act.yaml");
  };
  const std::string gemm = "      - {type: mul, inputs: {X: [t], Y: [w2]}, outputs: {Out: [o]}}\n";
  ProgramDesc p = program(gemm);
  ApplyBf16MixedPrecision(p);
  ProgramDesc kept = p;
  EXPECT_EQ(ElideBf16Casts(kept, {"t"}), 0u);
  EXPECT_EQ(ElideBf16Casts(kept, {"h"}), 0u);
  EXPECT_EQ(Ops(kept), Ops(p));
  EXPECT_EQ(ElideBf16Casts(p, {}), 1u);
  EXPECT_EQ(ElideBf16Casts(p, {}), 0u);  // idempotent
  EXPECT_FALSE(p.Root()->HasVar("t"));
  EXPECT_EQ(DTypeOf(p, "h@BF16"), DType::kBFloat16);
  // t also read by a float32 op: t stays, and so do the casts.
  ProgramDesc shared = program(gemm + "      - {type: mean, inputs: {X: [t]}, outputs: {Out: [m]}}\n");
  ApplyBf16MixedPrecision(shared);
  EXPECT_EQ(ElideBf16Casts(shared, {}), 0u);
  // A float32 input from no cast (x itself): nothing to elide.
  ProgramDesc direct = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [4, 6], dtype: float32}
      b: {shape: [6], dtype: float32, persistable: true}
      w2: {shape: [6, 3], dtype: float32, persistable: true}
    ops:
      - {type: fused_elemwise_activation, inputs: {X: [x], Y: [b]}, outputs: {Out: [t]}, attrs: {functor_list: [relu, elementwise_add]}}
      - {type: mul, inputs: {X: [t], Y: [w2]}, outputs: {Out: [o]}}
)",
                                    "direct.yaml");
  ApplyBf16MixedPrecision(direct);
  EXPECT_EQ(ElideBf16Casts(direct, {}), 0u);
  // A narrowing cast after a reshape of a float32 op's output stays where
  // it is: moved before the reshape it would go nowhere, and the reshape's
  // gradient would round what the GEMM's grad op hands tanh in float32.
  ProgramDesc reshaped = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [4, 2, 3], dtype: float32}
      w: {shape: [6, 3], dtype: float32, persistable: true}
    ops:
      - {type: tanh, inputs: {X: [x]}, outputs: {Out: [t]}}
      - {type: reshape, inputs: {X: [t]}, outputs: {Out: [r]}, attrs: {shape: [4, 6]}}
      - {type: mul, inputs: {X: [r], Y: [w]}, outputs: {Out: [o]}}
)",
                                      "reshaped.yaml");
  ApplyBf16MixedPrecision(reshaped);
  const std::vector<std::string> before = Ops(reshaped);
  EXPECT_EQ(ElideBf16Casts(reshaped, {}), 0u);
  EXPECT_EQ(Ops(reshaped), before);
}

// ---------------------------------------------------------------- parity

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// nabla's bf16 run against PyTorch's autocast, both rounding the same
// operands to bfloat16 at the same places. Summation order differs, so a
// bf16 result may round the other way and the difference grows through
// the network: the bound is a few bf16 ulps (2^-8 relative) of the largest
// value. The run must also differ from the float32 reference (PyTorch in
// float64, tests/reference/): proof that it ran in bf16 at all.
void ExpectParity(const std::string& name, double tol) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  cpu::InitCpuBackend();
  const fs::path dir = fs::path(NABLA_REFERENCE_DIR) / name;
  const fs::path want_dir = fs::path(NABLA_BF16_REFERENCE_DIR) / name;
  YAML::Node spec = YAML::LoadFile((dir / "case.yaml").string());
  const train::testing::TempDir scratch("nabla_bf16_parity");
  const fs::path out = scratch / "out";
  std::string cmd = std::string(NABLA_BIN_PATH) + " exec " + Quote((dir / "program.yaml").string()) +
                    " --precision bf16 --backward loss";
  for (const auto& f : spec["feeds"])
    cmd += " --feed " + Quote(f.first.as<std::string>() + "=" + (dir / f.second.as<std::string>()).string());
  std::string fetch;
  for (const auto& e : fs::directory_iterator(want_dir)) fetch += (fetch.empty() ? "" : ",") + e.path().stem().string();
  cmd += " --fetch " + Quote(fetch) + " --out " + Quote(out.string()) + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  int compared = 0;
  double off_fp32 = 0;
  for (const auto& e : fs::directory_iterator(want_dir)) {
    const std::string var = e.path().stem().string();
    Tensor want = ReadNpy(e.path().string(), HostDevice());
    Tensor got = ReadNpy((out / (var + ".npy")).string(), HostDevice());
    ASSERT_EQ(got.GetDType(), DType::kFloat32) << var;
    ASSERT_EQ(got.GetShape(), want.GetShape()) << var;
    Tensor fp32 = ReadNpy((dir / "expected" / (var + ".npy")).string(), HostDevice());
    double worst = 0, scale = 0, from_fp32 = 0;
    for (int64_t i = 0; i < want.Numel(); ++i) {
      const double g = got.Data<float>()[i];
      worst = std::max(worst, std::abs(g - want.Data<float>()[i]));
      from_fp32 = std::max(from_fp32, std::abs(g - fp32.Data<float>()[i]));
      scale = std::max(scale, std::abs(static_cast<double>(want.Data<float>()[i])));
    }
    off_fp32 = std::max(off_fp32, from_fp32 / scale);
    EXPECT_LE(worst, tol * scale) << var << " of " << name << ": max error " << worst << " of max " << scale;
    ++compared;
  }
  EXPECT_GE(compared, 5);
  EXPECT_GT(off_fp32, 1e-3) << "the run matches float32 to 1e-3: it did not run in bf16";
}

TEST(Bf16Parity, MlpMatchesTorchAutocast) { ExpectParity("mlp", 1.5e-2); }
// Here the batch norms amplify bf16 rounding: the conv gradients differ from
// float32 by 16-26 % of their largest value, from PyTorch's bf16 by < 1 %.
TEST(Bf16Parity, CnnMatchesTorchAutocast) { ExpectParity("cnn", 1.5e-2); }

// The bf16 kernels the parity cases do not reach: batched matmul with a
// broadcast, transposed Y (its gradient sums over the batch in float32) and
// conv2d in NHWC (float32 between conversions), forward and backward, against
// the float32 kernels of the same program. Two threads: the two branches
// run at once and the task graph moves ops between threads, which crashed
// inside oneDNN's JIT code about one run in 8 while primitives used oneDNN's
// per-thread library scratchpad (now cpu::DnnlScratchpad).
TEST(Bf16Kernels, MatmulBroadcastAndNhwcConvMatchFloat32) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  cpu::InitCpuBackend();
  const train::testing::TempDir scratch("nabla_bf16_kernels");
  const fs::path& dir = scratch.Dir();
  std::mt19937 gen(11);
  std::normal_distribution<float> d;
  auto feed = [&](const std::string& name, Shape shape) {
    Tensor t;
    float* p = t.Allocate<float>(HostDevice(), shape);
    for (int64_t i = 0; i < t.Numel(); ++i) p[i] = d(gen);
    WriteNpy((dir / (name + ".npy")).string(), t);
    return " --feed " + name + "=" + Quote((dir / (name + ".npy")).string());
  };
  std::ofstream((dir / "p.yaml").string()) << R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      a: {shape: [3, 5, 8], dtype: float32, persistable: true}
      b: {shape: [6, 8], dtype: float32, persistable: true}
      img: {shape: [2, 6, 6, 4], dtype: float32, persistable: true}
      k: {shape: [6, 2, 3, 3], dtype: float32, persistable: true}
    ops:
      - {type: matmul, inputs: {X: [a], Y: [b]}, outputs: {Out: [ab]}, attrs: {transpose_Y: true, alpha: 0.5}}
      - {type: square, inputs: {X: [ab]}, outputs: {Out: [ab2]}}
      - {type: mean, inputs: {X: [ab2]}, outputs: {Out: [l1]}}
      - type: conv2d
        inputs: {Input: [img], Filter: [k]}
        outputs: {Output: [c]}
        attrs: {data_format: NHWC, groups: 2, strides: [2, 1], paddings: [1, 1]}
      - {type: square, inputs: {X: [c]}, outputs: {Out: [c2]}}
      - {type: mean, inputs: {X: [c2]}, outputs: {Out: [l2]}}
      - {type: elementwise_add, inputs: {X: [l1], Y: [l2]}, outputs: {Out: [loss]}}
)";
  const std::string feeds =
      feed("a", {3, 5, 8}) + feed("b", {6, 8}) + feed("img", {2, 6, 6, 4}) + feed("k", {6, 2, 3, 3});
  const std::vector<std::string> vars = {"loss", "a@GRAD", "b@GRAD", "img@GRAD", "k@GRAD"};
  std::string fetch;
  for (const auto& v : vars) fetch += (fetch.empty() ? "" : ",") + v;
  for (const char* precision : {"fp32", "bf16"}) {
    const std::string cmd = std::string(NABLA_BIN_PATH) + " exec " + Quote((dir / "p.yaml").string()) +
                            " --backward loss --threads 2 --precision " + precision + feeds + " --fetch " +
                            Quote(fetch) + " --out " + Quote((dir / precision).string()) + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  for (const auto& v : vars) {
    Tensor want = ReadNpy((dir / "fp32" / (v + ".npy")).string(), HostDevice());
    Tensor got = ReadNpy((dir / "bf16" / (v + ".npy")).string(), HostDevice());
    ASSERT_EQ(got.GetShape(), want.GetShape()) << v;
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.Numel(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(got.Data<float>()[i]) - want.Data<float>()[i]));
      scale = std::max(scale, std::abs(static_cast<double>(want.Data<float>()[i])));
    }
    EXPECT_LE(worst, 2e-2 * scale) << v << ": max error " << worst << " of max " << scale;
    EXPECT_GT(worst, 0.0) << v << " is float32-exact: the bf16 kernels did not run";
  }
}

// flash_attn's bfloat16 kernel (bfloat16 GEMM operands on 128 x 128 tiles,
// float32 softmax and accumulation, softmax_lse kept in float32) fed through
// casts, forward and backward, causal over several tiles with a mask, against
// its float32 kernel on the same values.
TEST(Bf16Kernels, FlashAttnMatchesFloat32) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  cpu::InitCpuBackend();
  const train::testing::TempDir scratch("nabla_bf16_attention");
  const fs::path& dir = scratch.Dir();
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::string feeds;
  auto feed = [&](const std::string& name, Shape shape, float scale) {
    Tensor t;
    float* p = t.Allocate<float>(HostDevice(), shape);
    for (int64_t i = 0; i < t.Numel(); ++i) p[i] = scale * d(gen);
    WriteNpy((dir / (name + ".npy")).string(), t);
    feeds += " --feed " + name + "=" + Quote((dir / (name + ".npy")).string());
  };
  feed("q", {2, 200, 2, 16}, 1.0f);
  feed("k", {2, 200, 2, 16}, 1.0f);
  feed("v", {2, 200, 2, 16}, 1.0f);
  feed("mask", {2, 1, 200, 200}, 1.0f);
  const std::string vars = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      q: {shape: [2, 200, 2, 16], dtype: float32, persistable: true}
      k: {shape: [2, 200, 2, 16], dtype: float32, persistable: true}
      v: {shape: [2, 200, 2, 16], dtype: float32, persistable: true}
      mask: {shape: [2, 1, 200, 200], dtype: float32, stop_gradient: true}
    ops:
)";
  const std::string tail = R"(      - {type: square, inputs: {X: [out]}, outputs: {Out: [o2]}}
      - {type: mean, inputs: {X: [o2]}, outputs: {Out: [loss]}}
)";
  std::ofstream((dir / "fp32.yaml").string())
      << vars
      << "      - {type: flash_attn, inputs: {q: [q], k: [k], v: [v], attn_mask: [mask]}, outputs: {out: [out], "
         "softmax_lse: [lse]}, attrs: {causal: true}}\n"
      << tail;
  std::string casts;
  for (const char* x : {"q", "k", "v", "mask"})
    casts += std::string("      - {type: cast, inputs: {X: [") + x + "]}, outputs: {Out: [" + x +
             "_b]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}\n";
  std::ofstream((dir / "bf16.yaml").string())
      << vars << casts
      << "      - {type: flash_attn, inputs: {q: [q_b], k: [k_b], v: [v_b], attn_mask: [mask_b]}, outputs: {out: "
         "[out_b], softmax_lse: [lse]}, attrs: {causal: true}}\n"
      << "      - {type: cast, inputs: {X: [out_b]}, outputs: {Out: [out]}, attrs: {in_dtype: bfloat16, out_dtype: "
         "float32}}\n"
      << tail;
  const std::vector<std::string> fetched = {"out", "lse", "q@GRAD", "k@GRAD", "v@GRAD"};
  std::string fetch;
  for (const auto& v : fetched) fetch += (fetch.empty() ? "" : ",") + v;
  // "pass": the float32 program under --precision bf16, which must insert
  // the casts written by hand in bf16.yaml, softmax_lse left float32, and
  // then fold the gradients' casts into flash_attn_grad (force_fp32_output):
  // its q, k, v gradients are the float32 sums the hand-cast program rounds.
  for (const char* precision : {"fp32", "bf16", "pass"}) {
    const std::string program = std::string(precision) == "pass" ? "fp32" : precision;
    const std::string cmd = std::string(NABLA_BIN_PATH) + " exec " + Quote((dir / (program + ".yaml")).string()) +
                            " --backward loss --threads 2" + feeds + " --fetch " + Quote(fetch) + " --out " +
                            Quote((dir / precision).string()) +
                            (std::string(precision) == "pass" ? " --precision bf16" : "") + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  for (const auto& v : fetched) {
    Tensor want = ReadNpy((dir / "fp32" / (v + ".npy")).string(), HostDevice());
    Tensor got = ReadNpy((dir / "bf16" / (v + ".npy")).string(), HostDevice());
    ASSERT_EQ(got.GetShape(), want.GetShape()) << v;
    ASSERT_EQ(got.GetDType(), DType::kFloat32) << v;  // softmax_lse too: bfloat16 would shift every probability
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.Numel(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(got.Data<float>()[i]) - want.Data<float>()[i]));
      scale = std::max(scale, std::abs(static_cast<double>(want.Data<float>()[i])));
    }
    EXPECT_LE(worst, 2e-2 * scale) << v << ": max error " << worst << " of max " << scale;
    EXPECT_GT(worst, 0.0) << v << " is float32-exact: the bf16 kernel did not run";
    Tensor pass = ReadNpy((dir / "pass" / (v + ".npy")).string(), HostDevice());
    ASSERT_EQ(pass.GetDType(), DType::kFloat32) << v;
    const bool folded = v.find("@GRAD") != std::string::npos;
    int64_t unrounded = 0;
    for (int64_t i = 0; i < got.Numel(); ++i) {
      const float p = pass.Data<float>()[i];
      ASSERT_EQ(folded ? Bf16ToFloat(FloatToBf16(p)) : p, got.Data<float>()[i])
          << v << " at " << i << ": the pass differs from the casts";
      unrounded += p != Bf16ToFloat(FloatToBf16(p));
    }
    if (folded) {
      EXPECT_GT(unrounded, got.Numel() / 2) << v << ": the fold did not reach flash_attn_grad";
    }
  }
}

// A float32 causal mask (0, and -1e9 above the diagonal) cast to bfloat16,
// where -1e9 becomes -998244352, is still read as the causal pattern: the
// attention skips the hidden keys instead of adding the mask. The last key's
// scores (1.2e9) are made to outweigh the mask, so adding it would give each
// earlier query that key's value; skipping gives the plain causal output,
// bit for bit, as in float32. Square and bottom-right aligned (seq_q <
// seq_k), masks of rank 2 and 4, hidden entries -1e9 and -inf.
TEST(Bf16Kernels, CastCausalMaskIsReadAsCausal) {
  // Without bf16 instructions the products run widened to float32, but only
  // through oneDNN (the sanitizer builds have none).
  if (!cpu::OneDnnGemmBuilt()) GTEST_SKIP() << "bfloat16 GEMM needs oneDNN, which this build lacks";
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  struct Case {
    int64_t seq_q, seq_k;
    bool rank4;
    float hide;
  };
  for (const Case& c : {Case{40, 40, false, -1e9f}, Case{24, 40, true, -1e9f},
                        Case{40, 40, true, -std::numeric_limits<float>::infinity()}}) {
    SCOPED_TRACE(std::to_string(c.seq_q) + "x" + std::to_string(c.seq_k) + (c.rank4 ? " rank 4" : " rank 2") +
                 " hidden " + std::to_string(c.hide));
    const int64_t tq = c.seq_q, tk = c.seq_k, dim = 16;
    const Shape mask_shape = c.rank4 ? Shape{1, 1, tq, tk} : Shape{tq, tk};
    auto dims = [](const Shape& s) {
      std::string out;
      for (int64_t x : s) out += (out.empty() ? "" : ", ") + std::to_string(x);
      return "[" + out + "]";
    };
    const std::string qs = dims({1, tq, 1, dim}), ks = dims({1, tk, 1, dim});
    ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      q: {shape: )" + qs + R"(, dtype: float32}
      k: {shape: )" + ks + R"(, dtype: float32}
      v: {shape: )" + ks + R"(, dtype: float32}
      mask: {shape: )" + dims(mask_shape) +
                                     R"(, dtype: float32}
    ops:
      - {type: flash_attn, inputs: {q: [q], k: [k], v: [v], attn_mask: [mask]}, outputs: {out: [masked], softmax_lse: [l1]}}
      - {type: flash_attn, inputs: {q: [q], k: [k], v: [v]}, outputs: {out: [causal], softmax_lse: [l2]}, attrs: {causal: true}}
      - {type: cast, inputs: {X: [q]}, outputs: {Out: [qb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: cast, inputs: {X: [k]}, outputs: {Out: [kb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: cast, inputs: {X: [v]}, outputs: {Out: [vb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: cast, inputs: {X: [mask]}, outputs: {Out: [maskb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: flash_attn, inputs: {q: [qb], k: [kb], v: [vb], attn_mask: [maskb]}, outputs: {out: [masked_b], softmax_lse: [l3]}}
      - {type: flash_attn, inputs: {q: [qb], k: [kb], v: [vb]}, outputs: {out: [causal_b], softmax_lse: [l4]}, attrs: {causal: true}}
)",
                                 "cast_mask.yaml");
    Scope scope;
    std::mt19937 gen(3);
    std::normal_distribution<float> d;
    float* q = scope.Var("q")->GetTensor().Allocate<float>(HostDevice(), {1, tq, 1, dim});
    float* k = scope.Var("k")->GetTensor().Allocate<float>(HostDevice(), {1, tk, 1, dim});
    float* v = scope.Var("v")->GetTensor().Allocate<float>(HostDevice(), {1, tk, 1, dim});
    float* mask = scope.Var("mask")->GetTensor().Allocate<float>(HostDevice(), mask_shape);
    std::fill(q, q + tq * dim, 1.0f);
    for (int64_t i = 0; i < tk * dim; ++i) {
      k[i] = i / dim == tk - 1 ? 3e8f : 0.0f;  // scores 16 * 3e8 / sqrt(16) for the last key, 0 for the rest
      v[i] = d(gen);
    }
    const int64_t offset = tk - tq;  // key j is visible to query i iff j <= i + offset
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j) mask[i * tk + j] = j <= i + offset ? 0.0f : c.hide;
    CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
    auto values = [&](const char* var) {
      const Tensor& x = scope.FindVar(var)->GetTensor();
      std::vector<float> out(static_cast<size_t>(x.Numel()));
      for (int64_t i = 0; i < x.Numel(); ++i)
        out[i] = x.GetDType() == DType::kBFloat16 ? Bf16ToFloat(x.Data<bfloat16>()[i]) : x.Data<float>()[i];
      return out;
    };
    EXPECT_EQ(values("masked"), values("causal"));
    const std::vector<float> masked = values("masked_b"), causal = values("causal_b");
    EXPECT_EQ(masked, causal) << "the bfloat16 mask was added, not read as causal";
    // The first query sees keys 0..offset, all scored 0: its output is their mean, far from the hidden last key's.
    for (int64_t col = 0; col < dim; ++col) {
      float mean = 0;
      for (int64_t j = 0; j <= offset; ++j) mean += Bf16ToFloat(FloatToBf16(v[j * dim + col]));
      mean /= static_cast<float>(offset + 1);
      EXPECT_NEAR(causal[col], mean, 2e-2 * (1 + std::abs(mean))) << col;
    }
  }
}

// Both forms of the bf16 grad kernels of mul, matmul (transposed Y, a
// broadcast batch) and conv2d (NCHW: oneDNN): the program as the pass and
// the backward builder leave it (bf16 gradients, casts to float32) against
// the same with the casts folded (float32 gradients), and both against
// float32. Folding skips a rounding, so the folded run is closer to float32
// and differs from the unfolded one.
std::map<std::string, std::vector<float>> RunGemms(const std::string& precision) {
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [6, 16], dtype: float32, persistable: true}
      w: {shape: [16, 12], dtype: float32, persistable: true}
      a: {shape: [2, 3, 5, 6], dtype: float32, persistable: true}
      b: {shape: [4, 12], dtype: float32, persistable: true}
      k: {shape: [2, 3, 3, 3], dtype: float32, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: tanh, inputs: {X: [xw]}, outputs: {Out: [h]}}
      - {type: matmul, inputs: {X: [a], Y: [h]}, outputs: {Out: [ah]}, attrs: {alpha: 0.5}}
      - {type: matmul, inputs: {X: [ah], Y: [b]}, outputs: {Out: [ahb]}, attrs: {transpose_Y: true}}
      - {type: conv2d, inputs: {Input: [ahb], Filter: [k]}, outputs: {Output: [c]}, attrs: {paddings: [1, 1]}}
      - {type: square, inputs: {X: [c]}, outputs: {Out: [sq]}}
      - {type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}
)",
                               "gemms.yaml");
  if (precision != "fp32") ApplyBf16MixedPrecision(p);
  AppendBackward(p, "loss", {}, {});
  if (precision == "folded") {
    EXPECT_EQ(FoldBf16Casts(p), 8u);  // the gradients of x, w; a, h; ah, b; ahb, k
  }
  Scope scope;
  std::mt19937 gen(5);
  std::normal_distribution<float> d;
  const std::pair<const char*, Shape> inputs[] = {
      {"x", {6, 16}}, {"w", {16, 12}}, {"a", {2, 3, 5, 6}}, {"b", {4, 12}}, {"k", {2, 3, 3, 3}}};
  for (const auto& [name, shape] : inputs) {
    float* v = scope.Var(name)->GetTensor().Allocate<float>(HostDevice(), shape);
    for (int64_t i = 0; i < NumElements(shape); ++i) v[i] = d(gen) * 0.5f;
  }
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  std::map<std::string, std::vector<float>> out;
  for (const char* var : {"loss", "x@GRAD", "w@GRAD", "a@GRAD", "b@GRAD", "k@GRAD"}) {
    const Tensor& t = scope.FindVar(var)->GetTensor();
    EXPECT_EQ(t.GetDType(), DType::kFloat32) << var;
    out[var].assign(t.Data<float>(), t.Data<float>() + t.Numel());
  }
  return out;
}

TEST(Bf16Kernels, FoldedGradientsAreFloat32AndCloserToIt) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  auto fp32 = RunGemms("fp32"), rounded = RunGemms("bf16"), folded = RunGemms("folded");
  double off_rounded = 0, off_folded = 0;
  for (const auto& [var, want] : fp32) {
    double worst_r = 0, worst_f = 0, apart = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst_r = std::max(worst_r, std::abs(static_cast<double>(rounded[var][i]) - want[i]));
      worst_f = std::max(worst_f, std::abs(static_cast<double>(folded[var][i]) - want[i]));
      apart = std::max(apart, std::abs(static_cast<double>(folded[var][i]) - rounded[var][i]));
      scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    }
    EXPECT_LE(worst_r, 2e-2 * scale) << var;
    EXPECT_LE(worst_f, 2e-2 * scale) << var;
    if (var == "loss") {
      EXPECT_EQ(apart, 0.0) << "the fold changed the forward pass";
      continue;
    }
    EXPECT_GT(apart, 0.0) << var << ": folding changed nothing";
    off_rounded += worst_r / scale;
    off_folded += worst_f / scale;
  }
  EXPECT_LT(off_folded, off_rounded);
}

// matmul_grad's bfloat16 kernel where X's batches stack into one GEMM
// (X [2, 3, 4] against a Y of no batch, the logits against a tied
// embedding): X@GRAD and Y@GRAD against float64 sums of the same bfloat16
// values, in both forms: float32 outputs with Y@GRAD accumulated into
// AccumulateY and an sgd step folded in (what FuseGradOps asks of a weight
// gradient), and bfloat16 outputs, rounded once.
TEST(Bf16Kernels, StackedMatmulGradMatchesFloat64SumsInBothForms) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3, 4], dtype: float32, persistable: true}
      y: {shape: [5, 4], dtype: float32, persistable: true}
      g: {shape: [2, 3, 5], dtype: float32, persistable: true}
      acc: {shape: [5, 4], dtype: float32, persistable: true}
      lr: {shape: [1], dtype: float32, persistable: true}
    ops:
      - {type: cast, inputs: {X: [x]}, outputs: {Out: [xb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: cast, inputs: {X: [y]}, outputs: {Out: [yb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: cast, inputs: {X: [g]}, outputs: {Out: [gb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - type: matmul_grad
        inputs: {X: [xb], Y: [yb], Out@GRAD: [gb], AccumulateY: [acc], LearningRate: [lr]}
        outputs: {X@GRAD: [dx], Y@GRAD: [acc]}
        attrs: {transpose_Y: true, alpha: 0.5, force_fp32_output: true}
      - type: matmul_grad
        inputs: {X: [xb], Y: [yb], Out@GRAD: [gb]}
        outputs: {X@GRAD: [dxb], Y@GRAD: [dyb]}
        attrs: {transpose_Y: true, alpha: 0.5}
)",
                               "stacked_matmul_grad.yaml");
  Scope scope;
  std::mt19937 gen(3);
  std::normal_distribution<float> d;
  // Values bfloat16 holds exactly, so the casts change nothing.
  auto fill = [&](const char* name, Shape shape) {
    float* v = scope.Var(name)->GetTensor().Allocate<float>(HostDevice(), shape);
    std::vector<double> out(static_cast<size_t>(NumElements(shape)));
    for (size_t i = 0; i < out.size(); ++i) out[i] = v[i] = Bf16ToFloat(FloatToBf16(d(gen)));
    return out;
  };
  const std::vector<double> x = fill("x", {2, 3, 4}), y = fill("y", {5, 4}), g = fill("g", {2, 3, 5});
  const std::vector<double> acc = fill("acc", {5, 4});
  scope.Var("lr")->GetTensor().Allocate<float>(HostDevice(), {1})[0] = 0.25f;
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  // Out = 0.5 X Y^T over the 6 stacked rows: dX = 0.5 dOut Y, dY = 0.5 dOut^T X.
  std::vector<double> dx(24, 0.0), dy(20, 0.0);
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 5; ++j)
      for (int c = 0; c < 4; ++c) {
        dx[r * 4 + c] += 0.5 * g[r * 5 + j] * y[j * 4 + c];
        dy[j * 4 + c] += 0.5 * g[r * 5 + j] * x[r * 4 + c];
      }
  auto expect = [&](const char* var, DType dtype, const std::vector<double>& want, double tol) {
    const Tensor& t = scope.FindVar(var)->GetTensor();
    ASSERT_EQ(t.GetDType(), dtype) << var;
    ASSERT_EQ(t.Numel(), static_cast<int64_t>(want.size())) << var;
    for (size_t i = 0; i < want.size(); ++i) {
      const double got = dtype == DType::kFloat32 ? t.Data<float>()[i] : Bf16ToFloat(t.Data<bfloat16>()[i]);
      EXPECT_NEAR(got, want[i], tol * (1.0 + std::abs(want[i]))) << var << "[" << i << "]";
    }
  };
  std::vector<double> stepped(20);
  for (size_t i = 0; i < stepped.size(); ++i) stepped[i] = acc[i] - 0.25 * dy[i];
  expect("dx", DType::kFloat32, dx, 1e-6);
  expect("acc", DType::kFloat32, stepped, 1e-6);
  expect("dxb", DType::kBFloat16, dx, 1.0 / 256);
  expect("dyb", DType::kBFloat16, dy, 1.0 / 256);
}

// A bias and activation between two GEMMs, as ElideBf16Casts runs it in
// bfloat16 (no casts around it), against the program the mixed-precision
// pass leaves (the float32 op between a widening and a narrowing cast):
// the loss and every gradient bit for bit, for each activation and for the
// bias form (the kernels' one-pass path) and two other broadcasts.
struct ElideCase {
  const char* act;
  const char* name;
  const char* y_shape;
  int axis;
};

std::map<std::string, std::vector<float>> RunBiasActBetweenGemms(const ElideCase& c, bool elide, size_t* elided,
                                                                 std::vector<std::string>* ops) {
  ProgramDesc p = ParseProgram(StrCat(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3, 16], dtype: float32, persistable: true}
      w1: {shape: [16, 24], dtype: float32, persistable: true}
      b: {shape: )",
                                      c.y_shape, R"(, dtype: float32, persistable: true}
      w2: {shape: [24, 8], dtype: float32, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [h]}, attrs: {x_num_col_dims: 2}}
      - type: fused_elemwise_activation
        inputs: {X: [h], Y: [b]}
        outputs: {Out: [t]}
        attrs: {axis: )",
                                      c.axis, ", functor_list: [", c.act, R"(, elementwise_add]}
      - {type: mul, inputs: {X: [t], Y: [w2]}, outputs: {Out: [o]}, attrs: {x_num_col_dims: 2}}
      - {type: square, inputs: {X: [o]}, outputs: {Out: [sq]}}
      - {type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}
)"),
                               "bias_act.yaml");
  ApplyBf16MixedPrecision(p);
  if (elide) *elided = ElideBf16Casts(p, {"loss"});
  AppendBackward(p, "loss", {}, {});
  FoldBf16Casts(p);
  for (const auto& op : p.Root()->AllOps()) {
    std::string s = op->Type() + "(";
    for (const auto& n : op->InputArgumentNames()) s += n + " ";
    ops->push_back(s + ")");
  }
  Scope scope;
  std::mt19937 gen(11);
  std::normal_distribution<float> d;
  for (const char* name : {"x", "w1", "b", "w2"}) {
    const Shape shape = p.Root()->FindVar(name)->GetShape();
    float* v = scope.Var(name)->GetTensor().Allocate<float>(HostDevice(), shape);
    for (int64_t i = 0; i < NumElements(shape); ++i) v[i] = d(gen) * 0.7f;
  }
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  std::map<std::string, std::vector<float>> out;
  for (const char* var : {"loss", "x@GRAD", "w1@GRAD", "b@GRAD", "w2@GRAD"}) {
    const Tensor& t = scope.FindVar(var)->GetTensor();
    EXPECT_EQ(t.GetDType(), DType::kFloat32) << var;
    out[var].assign(t.Data<float>(), t.Data<float>() + t.Numel());
  }
  return out;
}

TEST(Bf16Kernels, BiasActivationBetweenGemmsRunsInBf16WithTheSameBits) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  const ElideCase cases[] = {{"relu", "bias", "[24]", -1},
                             {"tanh", "bias", "[24]", -1},
                             {"sigmoid", "bias", "[24]", -1},
                             {"gelu", "bias", "[24]", -1},
                             {"gelu", "same_shape", "[2, 3, 24]", -1},
                             {"tanh", "same_shape", "[2, 3, 24]", -1},
                             {"gelu", "axis_1", "[3]", 1},
                             {"sigmoid", "axis_1", "[3]", 1}};
  for (const ElideCase& c : cases) {
    SCOPED_TRACE(StrCat(c.act, " ", c.name));
    size_t elided = 0;
    std::vector<std::string> plain_ops, elided_ops;
    const auto plain = RunBiasActBetweenGemms(c, false, &elided, &plain_ops);
    const auto bf16 = RunBiasActBetweenGemms(c, true, &elided, &elided_ops);
    EXPECT_EQ(elided, 1u);
    // The two casts around the activation go, and the one narrowing its
    // input's gradient (the fold removed the other one from both).
    EXPECT_EQ(plain_ops.size(), elided_ops.size() + 3) << ::testing::PrintToString(elided_ops);
    for (const auto& s : elided_ops) {
      if (s.rfind("fused_elemwise_activation", 0) == 0) {
        EXPECT_NE(s.find("h@BF16 "), std::string::npos) << s;
      }
    }
    for (const auto& [var, want] : plain) EXPECT_EQ(bf16.at(var), want) << var;
  }
}

// The attention projections as the GPT example writes them: mul, bias add
// and reshape into flash_attn for q, k and v; flash_attn's output reshaped
// into the output projection. ElideBf16Casts moves each narrowing cast up
// through its reshape (reshape moves data) and then runs the bias adds in
// bfloat16, and drops the widening-narrowing pair left around flash_attn's
// output: no cast between the GEMMs and the attention. The loss and every
// weight's and x's gradient keep their bits; the q, k and v biases' are
// summed from gradients rounded to bfloat16 one step earlier.
std::map<std::string, std::vector<float>> RunProjections(bool elide, size_t* casts) {
  std::string ops;
  for (const char* t : {"q", "k", "v"})
    ops += StrCat("      - {type: mul, inputs: {X: [x], Y: [w", t, "]}, outputs: {Out: [", t,
                  "_xw]}, attrs: {x_num_col_dims: 2}}\n      - {type: elementwise_add, inputs: {X: [", t, "_xw], Y: [b",
                  t, "]}, outputs: {Out: [", t, "]}}\n      - {type: reshape, inputs: {X: [", t, "]}, outputs: {Out: [",
                  t, "4]}, attrs: {shape: [0, 0, 2, 8]}}\n");
  ProgramDesc p = ParseProgram(
      StrCat(
          R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 6, 16], dtype: float32, persistable: true}
      wq: {shape: [16, 16], dtype: float32, persistable: true}
      wk: {shape: [16, 16], dtype: float32, persistable: true}
      wv: {shape: [16, 16], dtype: float32, persistable: true}
      bq: {shape: [16], dtype: float32, persistable: true}
      bk: {shape: [16], dtype: float32, persistable: true}
      bv: {shape: [16], dtype: float32, persistable: true}
      wp: {shape: [16, 16], dtype: float32, persistable: true}
    ops:
)",
          ops,
          R"(      - {type: flash_attn, inputs: {q: [q4], k: [k4], v: [v4]}, outputs: {out: [o], softmax_lse: [lse]}, attrs: {causal: true}}
      - {type: reshape, inputs: {X: [o]}, outputs: {Out: [att]}, attrs: {shape: [0, 0, 16]}}
      - {type: mul, inputs: {X: [att], Y: [wp]}, outputs: {Out: [proj]}, attrs: {x_num_col_dims: 2}}
      - {type: square, inputs: {X: [proj]}, outputs: {Out: [sq]}}
      - {type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}
)"),
      "projections.yaml");
  ApplyBf16MixedPrecision(p);
  if (elide) {
    EXPECT_GT(ElideBf16Casts(p, {"loss"}), 0u);
    for (const auto& op : p.Root()->AllOps()) {
      if (op->Type() == "elementwise_add" || op->Type() == "reshape") {
        for (const auto& n : op->OutputArgumentNames())
          EXPECT_EQ(p.Root()->FindVar(n)->GetDType(), DType::kBFloat16) << op->Type() << " " << n;
      }
    }
  }
  AppendBackward(p, "loss", {}, {});
  FoldBf16Casts(p);
  *casts = 0;
  for (const auto& op : p.Root()->AllOps()) *casts += op->Type() == "cast";
  Scope scope;
  std::mt19937 gen(13);
  std::normal_distribution<float> d;
  for (const char* name : {"x", "wq", "wk", "wv", "bq", "bk", "bv", "wp"}) {
    const Shape shape = p.Root()->FindVar(name)->GetShape();
    float* v = scope.Var(name)->GetTensor().Allocate<float>(HostDevice(), shape);
    for (int64_t i = 0; i < NumElements(shape); ++i) v[i] = d(gen) * 0.5f;
  }
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  std::map<std::string, std::vector<float>> out;
  for (const char* var :
       {"loss", "x@GRAD", "wq@GRAD", "wk@GRAD", "wv@GRAD", "wp@GRAD", "bq@GRAD", "bk@GRAD", "bv@GRAD"}) {
    const Tensor& t = scope.FindVar(var)->GetTensor();
    EXPECT_EQ(t.GetDType(), DType::kFloat32) << var;
    out[var].assign(t.Data<float>(), t.Data<float>() + t.Numel());
  }
  return out;
}

TEST(Bf16Kernels, AttentionProjectionsRunWithoutCastsBetweenGemms) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  size_t plain_casts = 0, elided_casts = 0;
  const auto plain = RunProjections(false, &plain_casts);
  const auto elided = RunProjections(true, &elided_casts);
  // Forward: a widening and a narrowing cast around each bias add and
  // around flash_attn's output; backward: the three casts narrowing the bias
  // adds' input gradients and the one narrowing flash_attn's output gradient.
  EXPECT_EQ(plain_casts, elided_casts + 12);
  // The biases against the largest of their gradients: k's is 0 in exact
  // arithmetic (a shift of every key moves each query's scores alike, which
  // softmax ignores), so its own values are rounding noise.
  double scale = 0;
  for (const char* var : {"bq@GRAD", "bk@GRAD", "bv@GRAD"})
    for (float v : plain.at(var)) scale = std::max(scale, std::abs(static_cast<double>(v)));
  for (const auto& [var, want] : plain) {
    if (var[0] != 'b') {
      EXPECT_EQ(elided.at(var), want) << var;
      continue;
    }
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(elided.at(var)[i]) - want[i]));
    EXPECT_LE(worst, 4e-3 * scale) << var;
  }
}

// ---------------------------------------------------------------- nabla run

class Bf16Run : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    dir_.Write("train.csv", train::BlobsCsv(150, 1));
    dir_.Write("eval.csv", train::BlobsCsv(60, 2));
  }
  train::testing::TempDir dir_;
};

TEST_F(Bf16Run, TrainsAndCheckpointsStayFloat32) {
  dir_.Write("run.yaml", train::Config("{type: adam, lr: 0.05}",
                                       "precision: bf16\nepochs: 3\ncheckpoint: {dir: ckpt, every_steps: 5}\n"));
  train::Result r = train::Nabla(dir_, "run run.yaml");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("final eval accuracy: "), std::string::npos) << r.out;
  // The summary says which precision ran: bf16 where the CPU has it.
  EXPECT_NE(r.out.find(cpu::HasBf16Gemm() ? "precision        bf16 mixed precision" : "precision        fp32\n"),
            std::string::npos)
      << r.out;
  const auto points = train::ListCheckpoints(dir_.Path("ckpt"));
  ASSERT_FALSE(points.empty());
  train::SafetensorsFile f = train::ReadSafetensors(points.back().path);
  EXPECT_TRUE(f.tensors.count("w") && f.tensors.count("w@moment1")) << "parameters and adam state";
  for (const auto& [name, t] : f.tensors) {
    EXPECT_EQ(t.GetDType(), DType::kFloat32) << name;
    EXPECT_EQ(name.find("@BF16"), std::string::npos) << name;
  }
  // The header says F32 too (what PyTorch and NumPy readers see).
  const std::string bytes = train::Slurp(points.back().path);
  EXPECT_EQ(bytes.find("\"BF16\""), std::string::npos);
}

TEST_F(Bf16Run, CpuWithoutBf16SaysSoAndRunsFloat32) {
  dir_.Write("run.yaml", train::Config("{type: sgd, lr: 0.1}", "precision: bf16\nepochs: 1\n"));
  // oneDNN honours a lower ISA cap, which is how a CPU without bf16 looks.
  train::Result r = train::Nabla(dir_, "run run.yaml");
  setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  train::Result low = train::Nabla(dir_, "run run.yaml");
  unsetenv("ONEDNN_MAX_CPU_ISA");
  ASSERT_EQ(low.rc, 0) << low.out << low.err;
  EXPECT_NE(low.err.find("has no bf16 instructions"), std::string::npos) << low.err;
  EXPECT_EQ(r.err.find("has no bf16 instructions") != std::string::npos, !cpu::HasBf16Gemm()) << r.err;
}

TEST_F(Bf16Run, BadPrecisionIsAOneLineErrorWithExitCode2) {
  dir_.Write("run.yaml", "precision: fp16\n" + train::Config("{type: sgd, lr: 0.1}"));
  train::Result r = train::Nabla(dir_, "run run.yaml");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("run.yaml:1:12: precision must be one of fp32, bf16, but received 'fp16'"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  train::Result e =
      train::Nabla(dir_, "exec " + Quote(std::string(NABLA_REFERENCE_DIR) + "/mlp/program.yaml") + " --precision fp8");
  EXPECT_EQ(e.rc, 2) << e.err;
  EXPECT_NE(e.err.find("precision must be one of fp32, bf16, but received 'fp8'"), std::string::npos) << e.err;
}

}  // namespace
}  // namespace nabla
