// Vector math for kernels. glibc's tanhf is scalar (tanhf + expm1f were a
// quarter of an MLP step, perf); this one is a clamped rational
// approximation (Eigen's generic_fast_tanh_float, a few ulp from the exact
// value) that the compiler vectorizes. Every function here is built three
// times, for AVX-512, AVX2 with FMA and the baseline, and the best the CPU
// runs is picked once (Vectorized below).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"
#include "nabla/cpu_vectorized.h"

namespace nabla::cpu {
namespace {

// f() compiled for the widest vectors the CPU has (nabla/cpu_vectorized.h).
using cpu_isa::Vectorized;

inline float FastTanh(float x) {
  // Beyond +-7.9 the result rounds to +-1 in float. The clamp keeps NaN
  // (std::max / std::min return their first argument when unordered).
  const float c = 7.90531110763549805f;
  const float xc = std::min(std::max(x, -c), c);
  const float x2 = xc * xc;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * xc;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  // Tiny inputs: tanh(x) = x to float precision (and keeps -0.0 and subnormals exact).
  return std::abs(x) < 0.0004f ? x : p / q;
}

// FastExp's constants, shared with its AVX-512 form below.
constexpr float kExpLo = -87.0f, kExpHi = 88.0f;
constexpr float kExpRound = 12582912.0f;  // 1.5 * 2^23, bits 0x4B400000
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = hi + lo, k * hi exact
constexpr int kExpTerms = 8;                                      // 1/7!, ..., 1/2, 1, 1
constexpr float kExpTaylor[kExpTerms] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

// exp(x), relative error about 1e-7, for x <= 88 and NaN (below -87 it returns
// exp(-87), about 1.6e-38, rather than a subnormal: gelu's tail is then
// off by that much, absolutely). 2^k exp(r) with k = round(x / ln 2) and
// r reduced in two steps (ln 2 split into a short and a long part, so
// k * short is exact), exp(r) by its degree-7 Taylor polynomial
// (|r| <= ln 2 / 2, remainder < 1e-8); 2^k is built in the exponent bits. k is rounded by adding 1.5 * 2^23,
// which leaves k in the low mantissa bits: std::floor (a libm call) kept
// GCC from vectorizing the loops.
inline float FastExp(float x) {
  // x first in each: a NaN passes both clamps (std::max(-87, NaN) is -87),
  // so NaN scores give NaN probabilities, as std::exp and PyTorch give,
  // not a uniform row.
  x = std::min(std::max(x, kExpLo), kExpHi);
  const float shifted = x * kLog2e + kExpRound;
  const float k = shifted - kExpRound;
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;
  float p = kExpTaylor[0];
  for (int c = 1; c < kExpTerms; ++c) p = p * r + kExpTaylor[c];
  // Unsigned: a NaN's bits (k is NaN then, and the product too) must not
  // overflow a signed shift (UBSan).
  uint32_t k_bits;
  std::memcpy(&k_bits, &shifted, sizeof k_bits);
  const uint32_t bits = (k_bits - 0x4B400000u + 127u) << 23;  // kExpRound's bits
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

constexpr float kSqrtHalf = 0.70710678118654752440f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kCubic = 0.044715f;

// Gelu's loops run over blocks of kStage elements, one stage of the formula
// at a time. An element's whole formula is a chain of some 40 dependent
// operations, longer than the out-of-order window covers, so a loop doing
// one element after another ran at the chain's latency (2.4 ns an element
// on an AVX2 EPYC, perf); stage by stage, the vectors of a block are
// independent. The operations and their order are those of the formulas,
// so the bits do not depend on the blocking. 256 elements: 16 vectors a
// stage with AVX-512 (64, 4 vectors, left the FMA units half idle in the
// erf polynomial's chain: 65536 elements on a Zen 5 core, gelu 0.033 ->
// 0.023 ms and its gradient 0.044 -> 0.035 ms; the AVX2 clone on the same
// core 0.046 -> 0.045 ms).
constexpr int64_t kStage = 256;

// r[i] = 1 / d[i] for the m <= kStage elements of d, each d[i] >= 1
// (erfc's t; not for quotients whose result may be subnormal). With
// AVX-512, VRCP14PS and one Newton step (within an ulp of the quotient)
// rather than VDIVPS, whose throughput (16 lanes in about 16 cycles) was a
// third of gelu's time: 2M elements on an Emerald Rapids core, gelu 1.77 ->
// 1.31 ms, its gradient 2.5 -> 2.05. The tail is masked, so an element's
// bits do not depend on where the blocks fall. d is clamped to 2^100,
// whose reciprocal (t ~ 1e-30) leaves the results as 0 does (infinite x).
// Picked once, as Vectorized picks: one call per block.
using ReciprocalFn = void (*)(const float*, float*, int64_t);
void ReciprocalDivide(const float* d, float* r, int64_t m) {
  for (int64_t i = 0; i < m; ++i) r[i] = 1.0f / d[i];
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f,fma"))) void ReciprocalNewton(const float* d, float* r, int64_t m) {
  const __m512 one = _mm512_set1_ps(1.0f), cap = _mm512_set1_ps(1.2676506e30f);
  for (int64_t i = 0; i < m; i += 16) {
    const __mmask16 k = m - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (m - i)) - 1);
    // The masked forms with a source: GCC 12 warns about the plain ones'
    // undefined source (-Wmaybe-uninitialized).
    const __mmask16 all = 0xffff;
    const __m512 in = _mm512_mask_loadu_ps(one, k, d + i);
    const __m512 x = _mm512_mask_min_ps(in, all, in, cap);
    const __m512 r0 = _mm512_mask_rcp14_ps(x, all, x);
    const __m512 e = _mm512_fnmadd_ps(x, r0, one);  // 1 - x r0
    _mm512_mask_storeu_ps(r + i, k, _mm512_fmadd_ps(r0, e, r0));
  }
}
// AVX2: VRCPPS (12 bits) and one Newton step, within 3 ulp of the quotient
// (erfc's polynomial fit is good to 1.2e-7 relative, so Phi keeps its
// accuracy), rather than VDIVPS: bias + gelu on 2M elements on an AVX2
// EPYC, alternating builds, forward 3.0 -> 2.72 ms, gradient 4.9 -> 4.54.
__attribute__((target("avx2,fma"))) inline __m256 RcpNewton8(__m256 in) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 x = _mm256_min_ps(in, _mm256_set1_ps(1.2676506e30f));
  const __m256 r0 = _mm256_rcp_ps(x);
  const __m256 e = _mm256_fnmadd_ps(x, r0, one);  // 1 - x r0
  return _mm256_fmadd_ps(r0, e, r0);
}
__attribute__((target("avx2,fma"))) void ReciprocalNewtonAvx2(const float* d, float* r, int64_t m) {
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) _mm256_storeu_ps(r + i, RcpNewton8(_mm256_loadu_ps(d + i)));
  if (i == m) return;
  // The tail through a padded copy (VMASKMOVPS stores are microcoded on
  // AMD cores: masked, gelu was slower than with VDIVPS).
  alignas(32) float pad[8] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  std::memcpy(pad, d + i, sizeof(float) * static_cast<size_t>(m - i));
  _mm256_store_ps(pad, RcpNewton8(_mm256_load_ps(pad)));
  std::memcpy(r + i, pad, sizeof(float) * static_cast<size_t>(m - i));
}
#endif
ReciprocalFn PickReciprocal() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (cpu_isa::CpuIsa() == cpu_isa::Isa::kAvx512) return ReciprocalNewton;
  if (cpu_isa::CpuIsa() == cpu_isa::Isa::kAvx2Fma) return ReciprocalNewtonAvx2;
#endif
  return ReciprocalDivide;
}
inline void Reciprocal(const float* d, float* r, int64_t m) {
  static const ReciprocalFn f = PickReciprocal();
  f(d, r, m);
}

// erfc(z) = t E(t) exp(-z^2), t = 1 / (1 + z / 2), z >= 0: E(t) = erfc(z)
// exp(z^2) / t is smooth on t in (0, 1] (1 / (2 sqrt(pi)) at t = 0, 1 at
// t = 1), and this polynomial (from t^10 down) is its least-squares fit
// for relative error, within 1.5e-7 of it in float32 arithmetic. The
// factor exp(-z^2) is the Gaussian density's own, so gelu's gradient takes
// one exp where Numerical Recipes' erfcc form, t exp(-z^2 + P(t)), took
// two: vmath_bench's GeluGrad 1.05 -> 1.4 G elements/s, the GPT B=16, T=64
// step's bias + gelu gradient 0.59 -> 0.46 ms (1 Zen 4 core).
constexpr int kErfcTerms = 11;
constexpr float kErfcScaled[kErfcTerms] = {4.319470564e-02f, -2.347302199e-01f, 4.936883242e-01f, -4.549668709e-01f,
                                           1.321724521e-01f, -5.920954611e-02f, 9.346200756e-02f, 1.753160315e-01f,
                                           2.468845713e-01f, 2.820937539e-01f,  2.820947952e-01f};

// Phi(x), the standard normal CDF, as 1 - erfc(z) / 2 or erfc(-z) / 2 with
// z = |x| / sqrt(2) (never 1 + erf: the left tail keeps its relative
// accuracy), for the m <= kStage elements of x, erfc as above. Writes
// exp(-x^2 / 2) to gauss, for the gradient, where gauss is not null.
inline void NormalCdfBlock(const float* x, int64_t m, float* cdf, float* gauss) {
  float z[kStage], t[kStage], p[kStage], g[kStage];
  for (int64_t i = 0; i < m; ++i) {
    z[i] = std::abs(x[i]) * kSqrtHalf;
    p[i] = 1.0f + 0.5f * z[i];
  }
  Reciprocal(p, t, m);
  for (int64_t i = 0; i < m; ++i) {
    const float ti = t[i];
    float q = kErfcScaled[0];
    for (int c = 1; c < kErfcTerms; ++c) q = q * ti + kErfcScaled[c];
    p[i] = 0.5f * ti * q;
  }
  for (int64_t i = 0; i < m; ++i) g[i] = FastExp(-z[i] * z[i]);
  for (int64_t i = 0; i < m; ++i) p[i] *= g[i];  // erfc(z) / 2
  if (gauss) std::memcpy(gauss, g, sizeof(float) * static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) cdf[i] = x[i] >= 0.0f ? 1.0f - p[i] : p[i];
}

// The tanh form's (1 + tanh(u)) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3),
// as the logistic 1 / (1 + exp(-2u)): 1 + tanh(u) cancels for negative u
// (relative error 1e-4 at x = -3 in float32), the logistic does not.
inline void TanhFormCdfBlock(const float* x, int64_t m, float* cdf) {
  float e[kStage];
  for (int64_t i = 0; i < m; ++i) {
    const float u = kSqrt2OverPi * (x[i] + kCubic * x[i] * x[i] * x[i]);
    e[i] = FastExp(-2.0f * u);
  }
  // A quotient: 1 + e reaches 1.6e38, whose reciprocal is subnormal.
  for (int64_t i = 0; i < m; ++i) cdf[i] = 1.0f / (1.0f + e[i]);
}

inline void GeluImpl(const float* x, float* y, int64_t n, bool approximate) {
  float cdf[kStage];
  for (int64_t s = 0; s < n; s += kStage) {
    const int64_t m = std::min(kStage, n - s);
    if (approximate)
      TanhFormCdfBlock(x + s, m, cdf);
    else
      NormalCdfBlock(x + s, m, cdf, nullptr);
    for (int64_t i = 0; i < m; ++i) y[s + i] = x[s + i] * cdf[i];
  }
}

inline void GeluGradImpl(const float* x, const float* dy, float* dx, int64_t n, bool approximate) {
  float cdf[kStage], gauss[kStage];
  for (int64_t s = 0; s < n; s += kStage) {
    const int64_t m = std::min(kStage, n - s);
    const float* xs = x + s;
    if (approximate) {
      TanhFormCdfBlock(xs, m, cdf);
      for (int64_t i = 0; i < m; ++i) {
        const float v = xs[i], c = cdf[i];
        const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
        // (1 + tanh u) / 2 = c, (1 - tanh^2 u) / 2 = 2c(1 - c)
        dx[s + i] = dy[s + i] * (c + 2.0f * v * c * (1.0f - c) * du);
      }
    } else {
      NormalCdfBlock(xs, m, cdf, gauss);
      for (int64_t i = 0; i < m; ++i) dx[s + i] = dy[s + i] * (cdf[i] + xs[i] * kInvSqrt2Pi * gauss[i]);
    }
  }
}

// Scores of attention rows sit far below their row max wherever a mask
// (-1e9, -inf) hides a key: those give exactly 0 here, where FastExp's clamp
// would give 1.6e-38 and libm's expf takes its slow underflow path.
inline void ExpShiftedImpl(const float* x, float shift, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] - shift;
    y[i] = v < -87.0f ? 0.0f : FastExp(v);
  }
}

inline void TanhImpl(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastTanh(x[i]);
}

// Four inputs per pass over a block of y that stays in L1: y is read and
// written a quarter as often, and the inputs stream in four at a time (an
// unrolled RNN's 32 weight gradients, 2 MiB, come from L3). 2.3x the
// one-input-per-pass loop for 32 x 16K floats (AVX2, cold inputs).
inline void SumArraysImpl(const float* const* xs, int64_t count, float* y, int64_t n) {
  constexpr int64_t kBlock = 1024;
  for (int64_t lo = 0; lo < n; lo += kBlock) {
    const int64_t len = std::min(kBlock, n - lo);
    float* __restrict a = y + lo;
    const float* __restrict x0 = xs[0] + lo;
    for (int64_t i = 0; i < len; ++i) a[i] = x0[i];
    int64_t j = 1;
    for (; j + 3 < count; j += 4) {
      const float* __restrict p = xs[j] + lo;
      const float* __restrict q = xs[j + 1] + lo;
      const float* __restrict r = xs[j + 2] + lo;
      const float* __restrict s = xs[j + 3] + lo;
      for (int64_t i = 0; i < len; ++i) a[i] = (((a[i] + p[i]) + q[i]) + r[i]) + s[i];
    }
    for (; j < count; ++j) {
      const float* __restrict p = xs[j] + lo;
      for (int64_t i = 0; i < len; ++i) a[i] += p[i];
    }
  }
}

constexpr int kLanes = 16;

// The lanes added in a fixed order (pairwise), the same on every clone.
inline float AddLanes(const float* acc) {
  float t[kLanes / 2];
  for (int l = 0; l < kLanes / 2; ++l) t[l] = acc[l] + acc[l + kLanes / 2];
  for (int w = kLanes / 4; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  return t[0];
}

// Four floats as one vector of the compiler's (GCC and Clang): one register
// on every clone. RowMax's lane array written as scalars compiled to 16
// scalar maxss (GCC did not vectorize the select), and so did a select over
// one 16-float vector on the AVX2 and baseline clones, wider than their
// registers (GCC 12 splits it into scalar compares and stack spills: the
// GPT's softmax_with_cross_entropy, 2048 rows of 256, 1.41 -> 0.51 ms on an
// AVX2 EPYC). Four of them keep 16 lanes in flight; a max is exact in any
// order, and NaNs (never greater) are passed over in any grouping.
typedef float Lanes4 __attribute__((vector_size(4 * sizeof(float))));

inline Lanes4 MaxLanes(Lanes4 a, Lanes4 b) { return a < b ? b : a; }

inline float RowMaxImpl(const float* x, int64_t n) {
  Lanes4 acc[4];
  for (auto& a : acc) a = Lanes4{} + x[0];
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int g = 0; g < 4; ++g) {
      Lanes4 v;
      std::memcpy(&v, x + i + 4 * g, sizeof v);
      acc[g] = MaxLanes(acc[g], v);
    }
  const Lanes4 a = MaxLanes(MaxLanes(acc[0], acc[1]), MaxLanes(acc[2], acc[3]));
  float m = a[0];
  for (int l = 1; l < 4; ++l) m = std::max(m, a[l]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

inline float ExpShiftedSumImpl(const float* x, float shift, float* y, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = x[i + l] - shift;
      const float e = v < -87.0f ? 0.0f : FastExp(v);
      y[i + l] = e;
      acc[l] += e;
    }
  for (int l = 0; i < n; ++i, ++l) {
    const float v = x[i] - shift;
    const float e = v < -87.0f ? 0.0f : FastExp(v);
    y[i] = e;
    acc[l] += e;
  }
  return AddLanes(acc);
}

inline void ScaleRowImpl(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

inline float DotRowImpl(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return AddLanes(acc);
}

inline void SoftmaxGradRowImpl(const float* y, const float* dy, float* dx, int64_t n) {
  const float dot = DotRowImpl(y, dy, n);
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - dot);
}

inline void LayerNormRowImpl(const float* x, int64_t n, const float* scale, const float* bias, float eps, float* y,
                             float* mean, float* var) {
  // The mean as x[0] plus the mean of x - x[0]: the lanes then sum values
  // of the spread's size, not the mean's (rows far from zero keep their digits).
  const float x0 = n > 0 ? x[0] : 0.0f;  // a row of no elements reads nothing
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] - x0;
  for (int l = 0; i < n; ++i, ++l) acc[l] += x[i] - x0;
  const float mu = x0 + AddLanes(acc) / static_cast<float>(n);
  float sq[kLanes] = {};
  for (i = 0; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float d = x[i + l] - mu;
      sq[l] += d * d;
    }
  for (int l = 0; i < n; ++i, ++l) {
    const float d = x[i] - mu;
    sq[l] += d * d;
  }
  const float v = AddLanes(sq) / static_cast<float>(n);
  const float rstd = 1.0f / std::sqrt(v + eps);
  *mean = mu;
  *var = v;
  if (scale && bias)
    for (i = 0; i < n; ++i) y[i] = (x[i] - mu) * rstd * scale[i] + bias[i];
  else if (scale)
    for (i = 0; i < n; ++i) y[i] = (x[i] - mu) * rstd * scale[i];
  else if (bias)
    for (i = 0; i < n; ++i) y[i] = (x[i] - mu) * rstd + bias[i];
  else
    for (i = 0; i < n; ++i) y[i] = (x[i] - mu) * rstd;
}

inline void LayerNormGradRowImpl(const float* x, const float* dy, int64_t n, float mean, float rstd, const float* scale,
                                 float* dx, float* dscale, float* dbias) {
  if (dscale)
    for (int64_t i = 0; i < n; ++i) dscale[i] += dy[i] * ((x[i] - mean) * rstd);
  if (dbias)
    for (int64_t i = 0; i < n; ++i) dbias[i] += dy[i];
  if (!dx) return;
  float sg[kLanes] = {}, sgx[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float g = scale ? dy[i + l] * scale[i + l] : dy[i + l];
      sg[l] += g;
      sgx[l] += g * ((x[i + l] - mean) * rstd);
    }
  for (int l = 0; i < n; ++i, ++l) {
    const float g = scale ? dy[i] * scale[i] : dy[i];
    sg[l] += g;
    sgx[l] += g * ((x[i] - mean) * rstd);
  }
  const float mg = AddLanes(sg) / static_cast<float>(n), mgx = AddLanes(sgx) / static_cast<float>(n);
  for (i = 0; i < n; ++i) {
    const float g = scale ? dy[i] * scale[i] : dy[i];
    dx[i] = rstd * (g - mg - ((x[i] - mean) * rstd) * mgx);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The hottest of the above in AVX-512 intrinsics: exp and gelu were bound by
// the number of vector operations (Zen 4 runs a 512-bit operation in two
// halves), and the compiler's copies spent several on what one instruction
// does. 2^k is applied by VSCALEFPS and not by building exponent bits (an
// integer add, a shift and a product), the row sum stays in a register (the
// compiled copy kept its 16 lanes on the stack, a store-to-load chain each
// vector), and gelu runs four vectors at a time in registers where the
// compiled copy staged every step of the formula through L1. FastExp's
// operations and order otherwise, so its bits. On a Zen 4 core
// (vmath_bench, 1 thread): ExpShiftedSum 2.5 -> 4.7 G elements/s, gelu 1.1 ->
// 1.5 G/s, its gradient 0.87 -> 1.05 G/s (1.4 with kErfcScaled's one exp).
#define NABLA_AVX512 __attribute__((target("avx512f,fma"), always_inline)) inline
// The same for a lambda, which does not take its function's target.
#define NABLA_AVX512_LAMBDA __attribute__((target("avx512f,fma"), always_inline))

NABLA_AVX512 __m512 Splat(float v) { return _mm512_set1_ps(v); }

// MINPS, MAXPS and RCP14PS by their masked forms with a source: GCC 12
// warns about the plain ones' undefined source (-Wmaybe-uninitialized).
constexpr __mmask16 kAllLanes = 0xffff;
NABLA_AVX512 __m512 Min(__m512 a, __m512 b) { return _mm512_mask_min_ps(a, kAllLanes, a, b); }
NABLA_AVX512 __m512 Max(__m512 a, __m512 b) { return _mm512_mask_max_ps(a, kAllLanes, a, b); }
NABLA_AVX512 __m512 Rcp14(__m512 a) { return _mm512_mask_rcp14_ps(a, kAllLanes, a); }

// The tail's lanes: the first m (0 < m < 16).
NABLA_AVX512 __mmask16 FirstLanes(int64_t m) { return static_cast<__mmask16>((1u << m) - 1); }

// FastExp for x <= kExpHi (or NaN, which passes).
NABLA_AVX512 __m512 ExpBelowHi(__m512 x, __mmask16 keep = kAllLanes) {
  const __m512 round = Splat(kExpRound);
  const __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, Splat(kLog2e), round), round);
  const __m512 r = _mm512_fnmadd_ps(k, Splat(kLn2Lo), _mm512_fnmadd_ps(k, Splat(kLn2Hi), x));
  __m512 p = Splat(kExpTaylor[0]);
  for (int c = 1; c < kExpTerms; ++c) p = _mm512_fmadd_ps(p, r, Splat(kExpTaylor[c]));
  return _mm512_maskz_scalef_ps(keep, p, k);  // lanes outside `keep` are 0
}

// FastExp: both clamps, NaN kept (MINPS and MAXPS return their second
// operand when one is NaN).
NABLA_AVX512 __m512 Exp16(__m512 x) { return ExpBelowHi(Min(Splat(kExpHi), Max(Splat(kExpLo), x))); }

// ExpShiftedImpl's element: 0 below kExpLo, not its clamp's 1.6e-38.
NABLA_AVX512 __m512 ExpShifted16(__m512 x, __m512 shift) {
  const __m512 v = _mm512_sub_ps(x, shift);
  const __mmask16 visible = _mm512_cmp_ps_mask(v, Splat(kExpLo), _CMP_NLT_UQ);  // NaN too
  return ExpBelowHi(Min(Splat(kExpHi), v), visible);
}

// ExpShiftedImpl's values, and with kSum ExpShiftedSumImpl's sum: lane l
// adds elements l, l + 16, ... in order (the tail's to lanes 0, 1, ...),
// then AddLanes.
template <bool kSum>
__attribute__((target("avx512f,fma"))) float ExpShiftedRowAvx512(const float* x, float shift, float* y, int64_t n) {
  const __m512 s = Splat(shift);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = ExpShifted16(_mm512_loadu_ps(x + i), s);
    const __m512 b = ExpShifted16(_mm512_loadu_ps(x + i + 16), s);
    _mm512_storeu_ps(y + i, a);
    _mm512_storeu_ps(y + i + 16, b);
    if constexpr (kSum) acc = _mm512_add_ps(_mm512_add_ps(acc, a), b);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 a = ExpShifted16(_mm512_loadu_ps(x + i), s);
    _mm512_storeu_ps(y + i, a);
    if constexpr (kSum) acc = _mm512_add_ps(acc, a);
  }
  if (i < n) {
    const __mmask16 tail = FirstLanes(n - i);
    const __m512 a = ExpShifted16(_mm512_maskz_loadu_ps(tail, x + i), s);
    _mm512_mask_storeu_ps(y + i, tail, a);
    if constexpr (kSum) acc = _mm512_mask_add_ps(acc, tail, acc, a);
  }
  if constexpr (!kSum) return 0.0f;
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, acc);
  return AddLanes(lanes);
}

// RowMaxImpl's maximum: lane l takes elements l, l + 16, ... (the tail's
// to lanes 0, 1, ...) with MaxLanes' select (MAXPS returns its second
// operand where one is NaN: a NaN is passed over unless it came first).
__attribute__((target("avx512f,fma"))) float RowMaxAvx512(const float* x, int64_t n) {
  __m512 acc = Splat(x[0]);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = Max(_mm512_loadu_ps(x + i), acc);
  if (i < n) {
    const __mmask16 tail = FirstLanes(n - i);
    acc = _mm512_mask_max_ps(acc, tail, _mm512_maskz_loadu_ps(tail, x + i), acc);
  }
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, acc);
  float m = lanes[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, lanes[l]);
  return m;
}

// AddLanes on a register: the same pairwise order (halves, then quarters,
// ...), so the same bits.
NABLA_AVX512 float AddLanes16(__m512 acc) {
  // Both halves by the masked extract: GCC 12's plain one (and the cast to
  // the low half, built on it) warns about its undefined source.
  const __m512d a = _mm512_castps_pd(acc);
  const __m256d low = _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xff, a, 0);
  const __m256d high = _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xff, a, 1);
  const __m256 h = _mm256_add_ps(_mm256_castpd_ps(low), _mm256_castpd_ps(high));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(e, _mm_shuffle_ps(e, e, 1)));
}

// Loads element i.. of a row of n: whole vectors, then the masked tail.
NABLA_AVX512 __m512 LoadRow(const float* x, int64_t i, int64_t n) {
  return n - i >= 16 ? _mm512_loadu_ps(x + i) : _mm512_maskz_loadu_ps(FirstLanes(n - i), x + i);
}
NABLA_AVX512 void StoreRow(float* y, int64_t i, int64_t n, __m512 v) {
  if (n - i >= 16)
    _mm512_storeu_ps(y + i, v);
  else
    _mm512_mask_storeu_ps(y + i, FirstLanes(n - i), v);
}

// IEEE sqrt, as std::sqrt, without its errno path: that call, live across
// the kernel, kept every row's registers on the stack.
NABLA_AVX512 float SqrtSs(float v) { return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v))); }

// Rows a call: a short row's work is chains of dependent adds and two
// reductions (layer_norm's 128 elements), each waiting on the one before.
// A group's rows run each pass one after another with no reduction between
// them, so the core overlaps their chains; each row is read in memory order
// (rows interleaved vector by vector defeated the hardware prefetcher:
// 16384 rows of 128 out of cache took twice as long). Each row's operations
// are its one-row kernel's, in the same order, so the bits do not depend on
// the group. A group is a pack of row states, each its own local (an array
// of them, indexed in loops, was kept on the stack and stored to on every
// step).
constexpr int64_t kRowGroup = 4;

// ---- layer_norm: LayerNormRowImpl's for each row of n >= 1 (the lanes sum
// x - x[0], the tail's lanes past n adding 0, then (x - mu)^2, each summed
// by AddLanes); y may be x.
struct LnRow {
  const float* x;
  float* y;
  float* mean;
  float* var;
  __m512 x0, acc, mu, vr;
};

NABLA_AVX512 LnRow LnStart(const float* x, float* y, float* mean, float* var) {
  return {x, y, mean, var, Splat(x[0]), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
}

template <typename... Rows>
NABLA_AVX512 void LayerNormGroup(int64_t n, const float* scale, const float* bias, float eps, Rows&... rows) {
  auto sum = [n](LnRow& r) NABLA_AVX512_LAMBDA {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = n - i >= 16 ? kAllLanes : FirstLanes(n - i);
      r.acc = _mm512_mask_add_ps(r.acc, k, r.acc, _mm512_sub_ps(LoadRow(r.x, i, n), r.x0));
    }
  };
  (sum(rows), ...);
  const float fn = static_cast<float>(n);
  auto mean_of = [fn](const LnRow& r) NABLA_AVX512_LAMBDA { return r.x[0] + AddLanes16(r.acc) / fn; };
  ((*rows.mean = mean_of(rows), rows.mu = Splat(*rows.mean), rows.acc = _mm512_setzero_ps()), ...);
  auto squares = [n](LnRow& r) NABLA_AVX512_LAMBDA {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = n - i >= 16 ? kAllLanes : FirstLanes(n - i);
      const __m512 d = _mm512_sub_ps(LoadRow(r.x, i, n), r.mu);
      r.acc = _mm512_mask3_fmadd_ps(d, d, r.acc, k);
    }
  };
  (squares(rows), ...);
  ((*rows.var = AddLanes16(rows.acc) / fn, rows.vr = Splat(1.0f / SqrtSs(*rows.var + eps))), ...);
  auto out = [&](const LnRow& r) NABLA_AVX512_LAMBDA {
    for (int64_t i = 0; i < n; i += 16) {
      const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(LoadRow(r.x, i, n), r.mu), r.vr);
      __m512 v = xh;
      if (scale && bias)
        v = _mm512_fmadd_ps(xh, LoadRow(scale, i, n), LoadRow(bias, i, n));
      else if (scale)
        v = _mm512_mul_ps(xh, LoadRow(scale, i, n));
      else if (bias)
        v = _mm512_add_ps(xh, LoadRow(bias, i, n));
      StoreRow(r.y, i, n, v);
    }
  };
  (out(rows), ...);
}

// One row, a function of its own: the one-row group inlined into the rows
// function beside the group of four ran at half its speed (vmath_bench).
__attribute__((target("avx512f,fma"))) void LayerNormRowAvx512(const float* x, int64_t n, const float* scale,
                                                               const float* bias, float eps, float* y, float* mean,
                                                               float* var) {
  LnRow a = LnStart(x, y, mean, var);
  LayerNormGroup(n, scale, bias, eps, a);
}

__attribute__((target("avx512f,fma"))) void LayerNormRowsAvx512(const float* x, int64_t rows, int64_t n,
                                                                const float* scale, const float* bias, float eps,
                                                                float* y, float* mean, float* var) {
  auto row = [&](int64_t i) NABLA_AVX512_LAMBDA { return LnStart(x + i * n, y + i * n, mean + i, var + i); };
  int64_t r = 0;
  for (; r + kRowGroup <= rows; r += kRowGroup) {
    LnRow a = row(r), b = row(r + 1), c = row(r + 2), d = row(r + 3);
    LayerNormGroup(n, scale, bias, eps, a, b, c, d);
  }
  for (; r < rows; ++r) LayerNormRowAvx512(x + r * n, n, scale, bias, eps, y + r * n, mean + r, var + r);
}

// ---- its gradient: LayerNormGradRowImpl's for each row, the dscale,
// dbias and two sums in one pass over the group; dscale and dbias take the
// rows in order, as one-row calls add them. dx may be x or dy.
struct LnGradRow {
  const float* x;
  const float* dy;
  const float* acc;  // added to dx where not null
  float* dx;
  __m512 vm, vr, sg, sgx;
};

template <typename... Rows>
NABLA_AVX512 void LayerNormGradGroup(int64_t n, const float* scale, float* dscale, float* dbias, bool want_dx,
                                     Rows&... rows) {
  auto sums = [&](LnGradRow& r) NABLA_AVX512_LAMBDA {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = n - i >= 16 ? kAllLanes : FirstLanes(n - i);
      const __m512 d = LoadRow(r.dy, i, n);
      const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(LoadRow(r.x, i, n), r.vm), r.vr);
      if (dscale) StoreRow(dscale, i, n, _mm512_fmadd_ps(d, xh, LoadRow(dscale, i, n)));
      if (dbias) StoreRow(dbias, i, n, _mm512_add_ps(LoadRow(dbias, i, n), d));
      const __m512 g = scale ? _mm512_mul_ps(d, LoadRow(scale, i, n)) : d;
      r.sg = _mm512_mask_add_ps(r.sg, k, r.sg, g);
      r.sgx = _mm512_mask3_fmadd_ps(g, xh, r.sgx, k);
    }
  };
  (sums(rows), ...);
  if (!want_dx) return;
  const float fn = static_cast<float>(n);
  ((rows.sg = Splat(AddLanes16(rows.sg) / fn), rows.sgx = Splat(AddLanes16(rows.sgx) / fn)), ...);
  auto dx = [&](const LnGradRow& r) NABLA_AVX512_LAMBDA {
    for (int64_t i = 0; i < n; i += 16) {
      const __m512 d = LoadRow(r.dy, i, n);
      const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(LoadRow(r.x, i, n), r.vm), r.vr);
      const __m512 g = scale ? _mm512_mul_ps(d, LoadRow(scale, i, n)) : d;
      const __m512 v = _mm512_mul_ps(r.vr, _mm512_fnmadd_ps(xh, r.sgx, _mm512_sub_ps(g, r.sg)));
      StoreRow(r.dx, i, n, r.acc ? _mm512_add_ps(LoadRow(r.acc, i, n), v) : v);
    }
  };
  (dx(rows), ...);
}

NABLA_AVX512 LnGradRow LnGradStart(const float* x, const float* dy, const float* acc, float* dx, float mean,
                                   float rstd) {
  return {x, dy, acc, dx, Splat(mean), Splat(rstd), _mm512_setzero_ps(), _mm512_setzero_ps()};
}

__attribute__((target("avx512f,fma"))) void LayerNormGradRowAvx512(const float* x, const float* dy, int64_t n,
                                                                   float mean, float rstd, const float* scale,
                                                                   const float* acc, float* dx, float* dscale,
                                                                   float* dbias) {
  LnGradRow a = LnGradStart(x, dy, acc, dx, mean, rstd);
  LayerNormGradGroup(n, scale, dscale, dbias, dx != nullptr, a);
}

__attribute__((target("avx512f,fma"))) void LayerNormGradRowsAvx512(const float* x, const float* dy, int64_t rows,
                                                                    int64_t n, const float* mean, const float* rstd,
                                                                    const float* scale, const float* acc, float* dx,
                                                                    float* dscale, float* dbias) {
  auto at = [n](auto* p, int64_t i) { return p ? p + i * n : nullptr; };
  auto row = [&](int64_t i) NABLA_AVX512_LAMBDA {
    return LnGradStart(x + i * n, dy + i * n, at(acc, i), at(dx, i), mean[i], rstd[i]);
  };
  int64_t r = 0;
  for (; r + kRowGroup <= rows; r += kRowGroup) {
    LnGradRow a = row(r), b = row(r + 1), c = row(r + 2), d = row(r + 3);
    LayerNormGradGroup(n, scale, dscale, dbias, dx != nullptr, a, b, c, d);
  }
  for (; r < rows; ++r)
    LayerNormGradRowAvx512(x + r * n, dy + r * n, n, mean[r], rstd[r], scale, at(acc, r), at(dx, r), dscale, dbias);
}

// NormalCdfBlock's per element, for 16 lanes: Phi(x), and exp(-x^2 / 2)
// in *gauss where asked.
NABLA_AVX512 __m512 NormalCdf16(__m512 x, __m512* gauss) {
  const __m512 one = Splat(1.0f);
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), Splat(kSqrtHalf));
  // t = 1 / (1 + z / 2): ReciprocalNewton's steps.
  const __m512 d = Min(_mm512_fmadd_ps(Splat(0.5f), z, one), Splat(1.2676506e30f));
  const __m512 r0 = Rcp14(d);
  const __m512 t = _mm512_fmadd_ps(r0, _mm512_fnmadd_ps(d, r0, one), r0);
  __m512 q = Splat(kErfcScaled[0]);
  for (int c = 1; c < kErfcTerms; ++c) q = _mm512_fmadd_ps(q, t, Splat(kErfcScaled[c]));
  const __m512 g = Exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), z), z));
  const __m512 half_erfc = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(Splat(0.5f), t), q), g);
  if (gauss) *gauss = g;
  const __mmask16 right = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_sub_ps(half_erfc, right, one, half_erfc);
}

NABLA_AVX512 __m512 Gelu16(__m512 x) { return _mm512_mul_ps(x, NormalCdf16(x, nullptr)); }

NABLA_AVX512 __m512 GeluGrad16(__m512 x, __m512 dy) {
  __m512 gauss;
  const __m512 cdf = NormalCdf16(x, &gauss);
  return _mm512_mul_ps(dy, _mm512_fmadd_ps(_mm512_mul_ps(x, Splat(kInvSqrt2Pi)), gauss, cdf));
}

// Four vectors a step, each an independent chain of some 40 operations.
__attribute__((target("avx512f,fma"))) void GeluAvx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 v[4];
    for (int j = 0; j < 4; ++j) v[j] = Gelu16(_mm512_loadu_ps(x + i + 16 * j));
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(y + i + 16 * j, v[j]);
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Gelu16(_mm512_loadu_ps(x + i)));
  if (i == n) return;
  const __mmask16 tail = FirstLanes(n - i);
  _mm512_mask_storeu_ps(y + i, tail, Gelu16(_mm512_maskz_loadu_ps(tail, x + i)));
}

__attribute__((target("avx512f,fma"))) void GeluGradAvx512(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 v[4];
    for (int j = 0; j < 4; ++j) v[j] = GeluGrad16(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(dy + i + 16 * j));
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(dx + i + 16 * j, v[j]);
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dx + i, GeluGrad16(_mm512_loadu_ps(x + i), _mm512_loadu_ps(dy + i)));
  if (i == n) return;
  const __mmask16 tail = FirstLanes(n - i);
  _mm512_mask_storeu_ps(dx + i, tail,
                        GeluGrad16(_mm512_maskz_loadu_ps(tail, x + i), _mm512_maskz_loadu_ps(tail, dy + i)));
}
#undef NABLA_AVX512
#undef NABLA_AVX512_LAMBDA

inline bool OnAvx512Kernels() { return cpu_isa::CpuIsa() == cpu_isa::Isa::kAvx512; }
#else
inline bool OnAvx512Kernels() { return false; }
template <bool kSum>
float ExpShiftedRowAvx512(const float*, float, float*, int64_t) {
  return 0.0f;
}
float RowMaxAvx512(const float*, int64_t) { return 0.0f; }
void LayerNormRowAvx512(const float*, int64_t, const float*, const float*, float, float*, float*, float*) {}
void LayerNormGradRowAvx512(const float*, const float*, int64_t, float, float, const float*, const float*, float*,
                            float*, float*) {}
void LayerNormRowsAvx512(const float*, int64_t, int64_t, const float*, const float*, float, float*, float*, float*) {}
void LayerNormGradRowsAvx512(const float*, const float*, int64_t, int64_t, const float*, const float*, const float*,
                             const float*, float*, float*, float*) {}
void GeluAvx512(const float*, float*, int64_t) {}
void GeluGradAvx512(const float*, const float*, float*, int64_t) {}
#endif

}  // namespace

void Gelu(const float* x, float* y, int64_t n, bool approximate) {
  if (!approximate && OnAvx512Kernels()) return GeluAvx512(x, y, n);
  return Vectorized([=] { return GeluImpl(x, y, n, approximate); });
}

void GeluGrad(const float* x, const float* dy, float* dx, int64_t n, bool approximate) {
  if (!approximate && OnAvx512Kernels()) return GeluGradAvx512(x, dy, dx, n);
  return Vectorized([=] { return GeluGradImpl(x, dy, dx, n, approximate); });
}

void ExpShifted(const float* x, float shift, float* y, int64_t n) {
  if (OnAvx512Kernels()) {
    ExpShiftedRowAvx512<false>(x, shift, y, n);
    return;
  }
  return Vectorized([=] { return ExpShiftedImpl(x, shift, y, n); });
}

void Tanh(const float* x, float* y, int64_t n) {
  return Vectorized([=] { return TanhImpl(x, y, n); });
}

void SumArrays(const float* const* xs, int64_t count, float* y, int64_t n) {
  return Vectorized([=] { return SumArraysImpl(xs, count, y, n); });
}

float RowMax(const float* x, int64_t n) {
  if (OnAvx512Kernels()) return RowMaxAvx512(x, n);
  return Vectorized([=] { return RowMaxImpl(x, n); });
}

float ExpShiftedSum(const float* x, float shift, float* y, int64_t n) {
  if (OnAvx512Kernels()) return ExpShiftedRowAvx512<true>(x, shift, y, n);
  return Vectorized([=] { return ExpShiftedSumImpl(x, shift, y, n); });
}

void ScaleRow(float* y, float s, int64_t n) {
  return Vectorized([=] { return ScaleRowImpl(y, s, n); });
}

float DotRow(const float* a, const float* b, int64_t n) {
  return Vectorized([=] { return DotRowImpl(a, b, n); });
}

void SoftmaxGradRow(const float* y, const float* dy, float* dx, int64_t n) {
  return Vectorized([=] { return SoftmaxGradRowImpl(y, dy, dx, n); });
}

void LayerNormRow(const float* x, int64_t n, const float* scale, const float* bias, float eps, float* y, float* mean,
                  float* var) {
  if (n > 0 && OnAvx512Kernels()) return LayerNormRowAvx512(x, n, scale, bias, eps, y, mean, var);
  return Vectorized([=] { return LayerNormRowImpl(x, n, scale, bias, eps, y, mean, var); });
}

void LayerNormGradRow(const float* x, const float* dy, int64_t n, float mean, float rstd, const float* scale, float* dx,
                      float* dscale, float* dbias) {
  if (n > 0 && OnAvx512Kernels())
    return LayerNormGradRowAvx512(x, dy, n, mean, rstd, scale, nullptr, dx, dscale, dbias);
  return Vectorized([=] { return LayerNormGradRowImpl(x, dy, n, mean, rstd, scale, dx, dscale, dbias); });
}

void LayerNormRows(const float* x, int64_t rows, int64_t n, const float* scale, const float* bias, float eps, float* y,
                   float* mean, float* var) {
  if (n > 0 && OnAvx512Kernels()) return LayerNormRowsAvx512(x, rows, n, scale, bias, eps, y, mean, var);
  return Vectorized([=] {
    for (int64_t r = 0; r < rows; ++r) LayerNormRowImpl(x + r * n, n, scale, bias, eps, y + r * n, mean + r, var + r);
  });
}

void LayerNormGradRows(const float* x, const float* dy, int64_t rows, int64_t n, const float* mean, const float* rstd,
                       const float* scale, const float* acc, float* dx, float* dscale, float* dbias) {
  if (n > 0 && OnAvx512Kernels())
    return LayerNormGradRowsAvx512(x, dy, rows, n, mean, rstd, scale, acc, dx, dscale, dbias);
  // With acc, each row into scratch first: acc may be dx.
  std::vector<float> row(acc && dx ? static_cast<size_t>(n) : 0);
  return Vectorized([=, &row] {
    for (int64_t r = 0; r < rows; ++r) {
      float* d = dx ? dx + r * n : nullptr;
      if (!acc || !d) {
        LayerNormGradRowImpl(x + r * n, dy + r * n, n, mean[r], rstd[r], scale, d, dscale, dbias);
        continue;
      }
      LayerNormGradRowImpl(x + r * n, dy + r * n, n, mean[r], rstd[r], scale, row.data(), dscale, dbias);
      for (int64_t j = 0; j < n; ++j) d[j] = acc[r * n + j] + row[j];
    }
  });
}

// A loop of the one-row kernels: for the short rows of a causal tile
// (1 to 64 elements), rows interleaved in groups measured no faster than
// these calls made in a row (vmath_bench BM_CausalTile); what a plugin
// saves is a call through the C ABI per row.
void RowMaxRows(const float* x, int64_t ld, int64_t rows, const int64_t* lens, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    out[r] = lens[r] > 0 ? RowMax(x + r * ld, lens[r]) : -std::numeric_limits<float>::infinity();
}

void ExpShiftedRows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const int64_t* lens,
                    int64_t width, const float* shifts, float* sums) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const int64_t len = lens[r];
    if (sums)
      sums[r] = len > 0 ? ExpShiftedSum(xr, shifts[r], yr, len) : 0.0f;
    else if (len > 0)
      ExpShifted(xr, shifts[r], yr, len);
    std::fill(yr + len, yr + width, 0.0f);
  }
}

void DotRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t n, float* dots) {
  for (int64_t r = 0; r < rows; ++r) dots[r] = DotRow(a + r * lda, b + r * ldb, n);
}

}  // namespace nabla::cpu
