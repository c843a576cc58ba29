// Small bfloat16 GEMMs on AVX512-BF16 (VDPBF16PS) micro-kernels.
//
// Why not oneDNN for these: flash_attn multiplies tiles of one head, 64 x 64
// x 32 at the GPT's T = 64 (B = 16, 4 heads of 32), and a oneDNN matmul
// call costs about a microsecond outside its kernel (binding the arguments,
// brgemm dispatch, packing B its own way), as long as the product itself.
// Here B is packed once per call into VDPBF16PS's pair layout and the
// kernel reads A where it lies.
//
// Layout: the instruction multiplies pairs, lane j of C += A(i, 2p) B(2p, j)
// + A(i, 2p + 1) B(2p + 1, j), A's pair as one broadcast 32-bit word and B's
// pairs as 16 words, one per column. B becomes panels of 16 columns, each
// [ceil(k / 2)][16] words; an odd k's last pair and columns past n are
// zero-filled, so the kernel runs whole pairs and whole vectors and masks
// only its stores. A is read in place where it is row-major with an even
// k (a pair is 32 contiguous bits); otherwise it is packed the same way as B.
//
// With AMX (Sapphire Rapids on), the same panels of B are the B operands of
// the tile instruction (16 pairs by 16 columns, 64 bytes a row) and A is
// packed into rows of whole 32-element chunks of k; see AmxGemm below.
#include "gemm_bf16_small.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nabla/cpu/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12 reports the undefined pass-through operand of its own shuffle
// intrinsics as maybe uninitialized (GCC bug 105593, fixed in 13).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define NABLA_SMALL_GEMM_BF16 1
#endif

namespace nabla::cpu {

#ifndef NABLA_SMALL_GEMM_BF16

bool SmallGemmBf16OnAmx() { return false; }
bool SmallGemmBf16(bool, bool, int64_t, int64_t, int64_t, float, const bfloat16*, int64_t, const bfloat16*, int64_t,
                   float, float*, int64_t) {
  return false;
}

#else

namespace {

#define NABLA_BF16_TARGET __attribute__((target("avx512bf16,avx512vl,avx512bw,avx512f")))

// 16-column vectors of C per kernel call, and rows for each count of
// vectors: 6 x 4 accumulators, 4 vectors of B and a broadcast of A fill 29
// of the 32 registers; narrower products (a head of 32, two vectors) take
// more rows, so each vector of B loaded serves more multiplies.
constexpr int kNv = 4;
constexpr int MrFor(int nv) { return nv == 4 ? 6 : nv == 3 ? 8 : nv == 2 ? 12 : 16; }
// Tiles: up to 128 x 128 x 128 multiply-adds, the size below which
// SplitGemm keeps a GEMM on one thread anyway, with no edge over 256, so the
// packed operands (at most 128 KiB each, kept per thread for the next call)
// stay small; B's panels for one group of kNv vectors (k x 64 columns of
// bfloat16, 16 KiB at k = 128) stay in L1.
constexpr double kMaxMacs = 128.0 * 128.0 * 128.0;
constexpr int64_t kMaxEdge = 256;

// Grows, never shrinks: packing overwrites what it uses.
uint32_t* AtLeast(std::vector<uint32_t>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

inline __mmask16 Mask16(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u); }
inline __mmask32 Mask32(int64_t n) { return static_cast<__mmask32>(n >= 32 ? 0xffffffffu : (1u << n) - 1u); }

// out[p * ld_out + j] = x(2p, j) | x(2p + 1, j) << 16 for the k x cols matrix
// x (row stride ldx), j up to cols rounded up to 16, zeros past k and cols.
NABLA_BF16_TARGET void InterleaveRowPairs(const bfloat16* x, int64_t ldx, int64_t k, int64_t cols, uint32_t* out,
                                          int64_t ld_out) {
  const int64_t kp = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < cols; j0 += 16) {
    const __mmask16 mask = Mask16(cols - j0);
    for (int64_t p = 0; p < kp; ++p) {
      const __m256i lo = _mm256_maskz_loadu_epi16(mask, x + 2 * p * ldx + j0);
      const __m256i hi =
          2 * p + 1 < k ? _mm256_maskz_loadu_epi16(mask, x + (2 * p + 1) * ldx + j0) : _mm256_setzero_si256();
      const __m512i w = _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
      _mm512_storeu_si512(out + p * ld_out + j0, w);
    }
  }
}

// r[j][c] -> r[c][j] for 16 x 16 32-bit words: pairs of rows, then of
// 64-bit halves, then 128-bit lanes across groups of four registers.
NABLA_BF16_TARGET inline void Transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i a0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
    const __m512i a1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
    const __m512i a2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i a3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
    t[0 + c] = _mm512_shuffle_i32x4(a0, a2, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(a0, a2, 0xdd);
    t[8 + c] = _mm512_shuffle_i32x4(a1, a3, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(a1, a3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// B's panels from op(B) = x^T, x stored n x k (row stride ldx): the pairs of
// a column of op(B) are 32-bit words of a row of x, so each block of 16
// rows by 16 words is transposed into place.
// Panels are `height` >= ceil(k / 2) pairs apart; pairs past k stay as
// they are.
NABLA_BF16_TARGET void PackTransposed(const bfloat16* x, int64_t ldx, int64_t k, int64_t n, uint32_t* bp,
                                      int64_t height) {
  const int64_t kp = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t rows = std::min<int64_t>(16, n - j0);
    uint32_t* panel = bp + j0 * height;
    for (int64_t p0 = 0; p0 < kp; p0 += 16) {
      const __mmask32 mask = Mask32(k - 2 * p0);
      __m512i r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = j < rows ? _mm512_maskz_loadu_epi16(mask, x + (j0 + j) * ldx + 2 * p0) : _mm512_setzero_si512();
      Transpose16(r);
      const int64_t np = std::min<int64_t>(16, kp - p0);
      for (int64_t q = 0; q < np; ++q) _mm512_storeu_si512(panel + (p0 + q) * 16, r[q]);
    }
  }
}

inline uint32_t PairAt(const bfloat16* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// C[MR x 16 NV] = alpha * A B + beta * C. A's pair (r, p) lies at a + r *
// a_row + p * a_pair (elements); vector v of B at b + v * panel, 16 words
// per pair; `last` masks the columns of the last vector.
template <int MR, int NV>
NABLA_BF16_TARGET void Kernel(int64_t kp, const bfloat16* a, int64_t a_row, int64_t a_pair, const uint32_t* b,
                              int64_t panel, float alpha, float beta, float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * panel + p * 16);
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(PairAt(a + r * a_row + p * a_pair)));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = v == NV - 1 ? last : static_cast<__mmask16>(0xffff);
      float* out = c + r * ldc + v * 16;
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, out), x);
      _mm512_mask_storeu_ps(out, mask, x);
    }
}

using KernelFn = void (*)(int64_t, const bfloat16*, int64_t, int64_t, const uint32_t*, int64_t, float, float, float*,
                          int64_t, __mmask16);

// Kernels<NV>()[mr - 1]: the kernel for mr rows of NV vectors.
template <int NV, int... I>
constexpr std::array<KernelFn, sizeof...(I)> KernelRow(std::integer_sequence<int, I...>) {
  return {&Kernel<I + 1, NV>...};
}
template <int NV>
const KernelFn* Kernels() {
  static constexpr auto row = KernelRow<NV>(std::make_integer_sequence<int, MrFor(NV)>{});
  return row.data();
}

bool CpuHasAvx512Bf16() {
  static const bool has =
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return has;
}

// ---------------------------------------------------------------- AMX

// The AMX tiles where the CPU has them and Linux grants their state (5.16
// on: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, once per process;
// oneDNN asks the same). NABLA_AMX=0 keeps the VDPBF16PS kernels (for
// comparing and testing them on such a CPU).
bool CpuHasAmx() {
  static const bool has = [] {
    const char* env = std::getenv("NABLA_AMX");
    if ((env && std::string(env) == "0") || !CpuHasAvx512Bf16()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return amx_bf16 && amx_tile && syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
}

#define NABLA_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512bf16,avx512vl,avx512bw,avx512f")))

// LDTILECFG's 64 bytes: palette 1, tiles 0-7 all 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// words[r][c] -> out[c][r] for the rows x cols 32-bit words at `w` (row
// stride ldw), into `out` (row stride ldo): blocks of 16 x 16, the edges
// read and written under masks.
NABLA_BF16_TARGET void TransposeWords(const uint32_t* w, int64_t ldw, int64_t rows, int64_t cols, uint32_t* out,
                                      int64_t ldo) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const int64_t nr = std::min<int64_t>(16, rows - r0), nc = std::min<int64_t>(16, cols - c0);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = i < nr ? _mm512_maskz_loadu_epi32(Mask16(nc), w + (r0 + i) * ldw + c0) : _mm512_setzero_si512();
      Transpose16(r);
      for (int64_t j = 0; j < nc; ++j) _mm512_mask_storeu_epi32(out + (c0 + j) * ldo + r0, Mask16(nr), r[j]);
    }
}

// C[m x n] = alpha op(A) op(B) + beta C on the tiles. Operands are packed
// whole (they are at most 256 x 256): A as mp x kc words (mp = m rounded
// up to 32 rows, kc = ceil(k / 2) pairs rounded up to 16, the tile's 32
// elements of k), zero past m and k; B as the VDPBF16PS kernel's panels,
// each kc pairs high, zero past n (rounded up to 32) and k. Each 32 x 32
// block of C is four tiles (two of A, two of B loaded per chunk of k).
NABLA_AMX_TARGET void AmxGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                              int64_t lda, const bfloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t kp = (k + 1) / 2, kc = (kp + 15) / 16 * 16;
  const int64_t mp = (m + 31) / 32 * 32, np = (n + 31) / 32 * 32, nb = np / 16;
  thread_local std::vector<uint32_t> b_buf, a_buf, t_buf;
  thread_local std::vector<float> c_buf;
  uint32_t* bp = AtLeast(b_buf, nb * kc * 16);
  std::memset(bp, 0, static_cast<size_t>(nb * kc * 16) * sizeof(uint32_t));
  if (tb) {
    PackTransposed(b, ldb, k, n, bp, kc);
  } else {
    for (int64_t jb = 0; jb * 16 < n; ++jb)
      InterleaveRowPairs(b + jb * 16, ldb, k, std::min<int64_t>(16, n - jb * 16), bp + jb * kc * 16, 16);
  }
  uint32_t* ap = AtLeast(a_buf, mp * kc);
  std::memset(ap, 0, static_cast<size_t>(mp * kc) * sizeof(uint32_t));
  if (ta) {  // op(A)'s pairs come out pair-major, [kp][m]: transposed into rows
    const int64_t m16 = (m + 15) / 16 * 16;
    uint32_t* pairs = AtLeast(t_buf, kp * m16);
    InterleaveRowPairs(a, lda, k, m, pairs, m16);
    TransposeWords(pairs, m16, kp, m, ap, kc);
  } else {
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(ap + i * kc, a + i * lda, static_cast<size_t>(k) * sizeof(bfloat16));
    }
  }
  // A block of C inside m x n with alpha 1 and beta 0 or 1 (flash_attn's
  // scores and accumulations) starts from C's tiles (or zeros) and goes
  // back to C; any other block goes through scratch and is scaled there.
  const bool in_place_ok = alpha == 1.0f && (beta == 0.0f || beta == 1.0f);
  float* acc = nullptr;
  const TileConfig config;
  _tile_loadconfig(&config);
  const int64_t a_stride = kc * 4, b_stride = 64, c_bytes = ldc * 4;  // bytes
  for (int64_t i0 = 0; i0 < mp; i0 += 32)
    for (int64_t j0 = 0; j0 < np; j0 += 32) {
      const bool direct = in_place_ok && i0 + 32 <= m && j0 + 32 <= n;
      float* cb = c + i0 * ldc + j0;
      if (direct && beta != 0.0f) {
        _tile_loadd(0, cb, c_bytes);
        _tile_loadd(1, cb + 16, c_bytes);
        _tile_loadd(2, cb + 16 * ldc, c_bytes);
        _tile_loadd(3, cb + 16 * ldc + 16, c_bytes);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      const uint32_t* b0 = bp + (j0 / 16) * kc * 16;
      const uint32_t* b1 = b0 + kc * 16;
      for (int64_t p = 0; p < kc; p += 16) {
        _tile_loadd(4, ap + i0 * kc + p, a_stride);
        _tile_loadd(5, ap + (i0 + 16) * kc + p, a_stride);
        _tile_loadd(6, b0 + p * 16, b_stride);
        _tile_loadd(7, b1 + p * 16, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      if (direct) {
        _tile_stored(0, cb, c_bytes);
        _tile_stored(1, cb + 16, c_bytes);
        _tile_stored(2, cb + 16 * ldc, c_bytes);
        _tile_stored(3, cb + 16 * ldc + 16, c_bytes);
        continue;
      }
      if (acc == nullptr) {
        if (c_buf.size() < 32 * 32) c_buf.resize(32 * 32);
        acc = c_buf.data();
      }
      _tile_stored(0, acc, 128);
      _tile_stored(1, acc + 16, 128);
      _tile_stored(2, acc + 16 * 32, 128);
      _tile_stored(3, acc + 16 * 32 + 16, 128);
      const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
      for (int64_t i = i0; i < std::min(m, i0 + 32); ++i)
        for (int64_t j = j0; j < std::min(n, j0 + 32); j += 16) {
          const __mmask16 mask = Mask16(n - j);
          float* out = c + i * ldc + j;
          __m512 x = _mm512_mul_ps(_mm512_loadu_ps(acc + (i - i0) * 32 + (j - j0)), va);
          if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, out), x);
          _mm512_mask_storeu_ps(out, mask, x);
        }
    }
  _tile_release();
}

}  // namespace

bool SmallGemmBf16OnAmx() { return CpuHasAmx(); }

bool SmallGemmBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a, int64_t lda,
                   const bfloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (k <= 0 || k > kMaxEdge || m > kMaxEdge || n > kMaxEdge || static_cast<double>(m) * n * k > kMaxMacs ||
      !CpuHasAvx512Bf16())
    return false;
  if (CpuHasAmx()) {
    AmxGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return true;
  }
  const int64_t kp = (k + 1) / 2, nb = (n + 15) / 16;
  thread_local std::vector<uint32_t> b_buf, a_buf;
  uint32_t* bp = AtLeast(b_buf, nb * kp * 16);
  if (tb) {
    PackTransposed(b, ldb, k, n, bp, kp);
  } else {
    for (int64_t jb = 0; jb < nb; ++jb)
      InterleaveRowPairs(b + jb * 16, ldb, k, std::min<int64_t>(16, n - jb * 16), bp + jb * kp * 16, 16);
  }
  // A's pairs: in place, or packed [kp][m rounded up to 16] words.
  const bfloat16* ap = a;
  int64_t a_row = lda, a_pair = 2;
  if (ta || k % 2 != 0) {
    const int64_t mp = (m + 15) / 16 * 16;
    uint32_t* packed = AtLeast(a_buf, kp * mp);
    if (ta) {
      InterleaveRowPairs(a, lda, k, m, packed, mp);
    } else {  // an odd k: the rows' pairs, the last one zero-padded
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < kp; ++p) {
          const uint32_t lo = a[i * lda + 2 * p].bits;
          const uint32_t hi = 2 * p + 1 < k ? a[i * lda + 2 * p + 1].bits : 0u;
          packed[p * mp + i] = lo | hi << 16;
        }
    }
    ap = reinterpret_cast<const bfloat16*>(packed);
    a_row = 2;
    a_pair = 2 * mp;
  }
  for (int64_t jb = 0; jb < nb; jb += kNv) {
    const int64_t nv = std::min<int64_t>(kNv, nb - jb);
    const __mmask16 last = Mask16(n - (jb + nv - 1) * 16);
    const KernelFn* kernels = nv == 4 ? Kernels<4>() : nv == 3 ? Kernels<3>() : nv == 2 ? Kernels<2>() : Kernels<1>();
    const int64_t rows = MrFor(static_cast<int>(nv));
    for (int64_t i = 0; i < m; i += rows) {
      const int64_t mr = std::min(rows, m - i);
      kernels[mr - 1](kp, ap + i * a_row, a_row, a_pair, bp + jb * kp * 16, kp * 16, alpha, beta, c + i * ldc + jb * 16,
                      ldc, last);
    }
  }
  return true;
}

#endif

}  // namespace nabla::cpu
