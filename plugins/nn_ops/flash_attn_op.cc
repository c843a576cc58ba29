// flash_attn: out = softmax(q k^T / sqrt(head_dim) + attn_mask) v per batch
// and head, with q, k, v, out laid out [batch, seq, heads, head_dim] (Paddle's
// flash_attn). Computed FlashAttention-2's way so that no [seq_q, seq_k]
// tensor exists in forward or backward and memory stays linear in the
// sequence:
//  - forward: per block of queries, keys stream by in tiles; each row keeps a
//    running max m and sum l of exp(s - m) and rescales its partial output
//    when m grows (the online softmax). softmax_lse = m + log(l) is saved.
//  - backward: per (batch, head), key tiles outer and query tiles inner;
//    P = exp(s - softmax_lse) is recomputed tile by tile, and with
//    D = rowsum(dO * O) (for a few keys rowsum(P * dP), kFlashAttnShortKeys):
//    dV += P^T dO, dP = dO V^T, dS = P * (dP - D),
//    dQ += scale dS K, dK += scale dS^T Q.
// Tiles are products of GEMMs on one head's rows: float32 ones on
// flash_attn's own register kernels where the CPU has AVX2 or AVX-512
// (TileProduct512, OwnTilesFor), the rest on cpu::Gemm. In the tensors
// those rows are heads * head_dim apart; the bfloat16 kernels, and the
// float32 ones past 256 rows, copy a head's rows into dense scratch first
// (Head, HeadRows, DenseRows) and accumulate its bfloat16 gradients densely
// (float32 ones where they lie), because oneDNN takes dense tiles with its
// brgemm kernels and strided ones with its older gemm (bfloat16 128 x 128 x
// 64 tiles: 270 against 330-360 GFLOP/s, gemm_bench's BM_TileBf16), which
// outweighs the copies. (bfloat16 tiles now run on the backend's own
// kernels, AVX512-BF16 or AMX, which pack B either way and read a dense A
// in place on AVX512-BF16.) In float32 k and v are also
// packed transposed (kKeysTransposed), so that no tile product has a
// transposed B; a causal tile the diagonal crosses runs as bands only as
// wide as what they see (ForEachRowBand).
// causal: key j is visible to query i iff j <= i + (seq_k - seq_q), the
// bottom-right alignment of FlashAttention 2.1 on, the plain lower triangle
// when seq_q == seq_k. Tiles wholly above the diagonal are skipped and, inside
// a diagonal tile, hidden scores never reach exp. A row that sees no key
// (all masked) gives zeros and softmax_lse -inf.
// dropout (is_test false) scales each probability by a factor drawn again
// in backward from seed_offset (AttnDropout, flash_attn.h): with Z that
// factor, O = (P * Z) V, so dV = (P * Z)^T dO and dS = P * (dP * Z - D);
// D = rowsum(dO * O) = rowsum(P * Z * (dO V^T)) still holds.
// bfloat16 q, k, v: GEMM operands in bfloat16, softmax and accumulation in
// float32; flash_attn_grad with force_fp32_output (set by FoldBf16Casts
// where casts alone read the gradients) writes those float32 accumulators
// as the gradients, unrounded, as mul's and matmul's grad ops do.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include <immintrin.h>

#include "flash_attn.h"
#include "nabla/cpu/vmath.h"
#include "nabla/cpu_vectorized.h"
#include "nabla/opkit/philox.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

void AttnMaskStrides(const Shape& mask, const Shape& target, int64_t* strides, const std::string& where) {
  NABLA_ENFORCE(!mask.empty() && mask.size() <= 4, kInvalidArgument, where,
                ": attn_mask must have rank 1 to 4 (broadcast to [batch, heads, seq_q, seq_k] = ",
                ShapeToString(target), "), but received shape ", ShapeToString(mask));
  const size_t lead = 4 - mask.size();
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    strides[d] = 0;
    if (static_cast<size_t>(d) < lead) continue;
    const int64_t m = mask[d - lead];
    NABLA_ENFORCE(m == 1 || DimsCompatible(m, target[d]), kInvalidArgument, where, ": attn_mask of shape ",
                  ShapeToString(mask), " does not broadcast to [batch, heads, seq_q, seq_k] = ", ShapeToString(target));
    strides[d] = m == 1 ? 0 : stride;
    stride *= m;
  }
}

namespace {

AttnDropout DropoutFrom(const ExecutionContext& ctx, const char* slot) {
  AttnDropout d;
  d.p = ctx.Attr<float>("dropout");
  d.on = d.p > 0.0f && !ctx.Attr<bool>("is_test");
  if (!d.on) return d;
  d.scale = 1.0 / (1.0 - static_cast<double>(d.p));
  if (slot) {
    const auto so = ctx.InputHostTensor(slot);  // a Tensor, or (C ABI) the SDK's HostTensor
    NABLA_ENFORCE(so.GetDType() == DType::kInt64 && so.Numel() == 2, kInvalidArgument, "op '", ctx.Op().Type(),
                  "': ", slot, " must be int64 [seed, offset], but received ", DTypeName(so.GetDType()), " ",
                  ShapeToString(so.GetShape()));
    d.seed = static_cast<uint64_t>(so.Data<int64_t>()[0]);
    d.offset = static_cast<uint32_t>(so.Data<int64_t>()[1]);
  } else {
    d.seed = ctx.Seed();
  }
  return d;
}

inline double ToDouble(float x) { return x; }
inline double ToDouble(double x) { return x; }
inline double ToDouble(bfloat16 x) { return Bf16ToFloat(x); }

// -1e9, the hiding value, as type T holds it: float32 and float64 exactly,
// bfloat16 as -998244352 (its nearest, 8 bits of mantissa). A float32
// causal mask cast to bfloat16 (precision: bf16) must still read as causal:
// compared with -1e9 itself, the GPT step's bf16 attention ran every tile,
// added the mask and took exps of hidden scores.
template <typename T>
double HidingValue() {
  if constexpr (std::is_same_v<T, bfloat16>)
    return ToDouble(FloatToBf16(-1e9f));
  else
    return ToDouble(static_cast<T>(-1e9));
}

template <typename T>
bool CausalPattern(const T* mask, int64_t n, int64_t seq_q, int64_t seq_k) {
  const int64_t offset = seq_k - seq_q;
  const double hidden = HidingValue<T>();
  for (int64_t at = 0; at < n; at += seq_k) {
    const int64_t i = (at / seq_k) % seq_q;
    const int64_t visible = std::min(seq_k, i + offset + 1);
    for (int64_t j = 0; j < visible; ++j)
      if (ToDouble(mask[at + j]) != 0.0) return false;
    for (int64_t j = visible; j < seq_k; ++j)
      if (!(ToDouble(mask[at + j]) <= hidden)) return false;
  }
  return true;
}

}  // namespace

bool IsCausalMask(const Tensor& mask, int64_t seq_q, int64_t seq_k) {
  const Shape& shape = mask.GetShape();
  const size_t r = shape.size();
  if (r < 2 || r > 4 || shape[r - 2] != seq_q || shape[r - 1] != seq_k || seq_k < seq_q || seq_q <= 0) return false;
  switch (mask.GetDType()) {
    case DType::kFloat32:
      return CausalPattern(mask.Data<float>(), mask.Numel(), seq_q, seq_k);
    case DType::kFloat64:
      return CausalPattern(mask.Data<double>(), mask.Numel(), seq_q, seq_k);
    case DType::kBFloat16:
      return CausalPattern(mask.Data<bfloat16>(), mask.Numel(), seq_q, seq_k);
    default:
      return false;
  }
}

AttnDropout ForwardDropout(const ExecutionContext& ctx) {
  return DropoutFrom(ctx, ctx.HasInput("fixed_seed_offset") ? "fixed_seed_offset" : nullptr);
}

AttnDropout BackwardDropout(const ExecutionContext& ctx) {
  const char* slot = ctx.HasInput("seed_offset")         ? "seed_offset"
                     : ctx.HasInput("fixed_seed_offset") ? "fixed_seed_offset"
                                                         : nullptr;
  const float p = ctx.Attr<float>("dropout");
  NABLA_ENFORCE(slot || p == 0.0f || ctx.Attr<bool>("is_test"), kInvalidArgument, "op '", ctx.Op().Type(),
                "': dropout ", p,
                " needs the forward's seed_offset (or fixed_seed_offset) to draw its mask again, "
                "but neither is an input");
  return DropoutFrom(ctx, slot);
}

namespace {

// The dropout factors (0 or 1 / (1 - p)) of row i, keys [j0, j0 + n), of
// head bh: four keys per Philox draw.
template <typename A>
void DropoutFactors(const AttnDropout& dr, int64_t bh, int64_t i, int64_t j0, int64_t n, A* z) {
  const A scale = static_cast<A>(dr.scale);
  for (int64_t j = j0; j < j0 + n;) {
    const std::array<uint32_t, 4> w = opkit::Philox4x32(
        dr.seed, {static_cast<uint32_t>(j >> 2), static_cast<uint32_t>(i), static_cast<uint32_t>(bh), dr.offset});
    for (int64_t lane = j & 3; lane < 4 && j < j0 + n; ++lane, ++j)
      z[j - j0] = opkit::PhiloxUniform(w[lane]) >= dr.p ? scale : A(0);
  }
}

// 128 x 128 tiles: a tile of scores (64 KiB in float32) and the q, k, v
// rows it reads stay in L2, and each GEMM is large enough that the library's
// call and packing costs stay small (64 x 64 tiles were 1.5-2x slower for
// bfloat16 on oneDNN, and no faster for float32, at T = 1024). One 256 x
// 256 tile per head at the GPT's T = 256 was no faster either (float32, 1
// Zen 5 core: forward 3.1 and backward 6.3 ms both ways).
constexpr int64_t kBlockQ = 128;
constexpr int64_t kBlockK = 128;

// Whether a head's rows are copied dense before its products. bfloat16's
// tiles run on oneDNN's brgemm or the backend's own kernels, which take
// dense operands. float32 and float64 ones run on OpenBLAS and oneDNN's
// gemm:jit (ONEDNN_VERBOSE), which read rows heads * head_dim apart as
// they lie: where a head has one or two tiles of rows (sequences to 256),
// each row is read by few products and the copies, a fifth of float32
// attention's own work at the GPT's T = 256 (rows of 256 bytes a KiB
// apart), cost more than the strided reads (forward + backward 12.6 -> 11.9
// ms there, 1 thread); from 512 on every row is read by four or more
// products and the dense copies won (non-causal T = 512, 8 heads: 72
// against 73.5 ms; causal T = 1024: 38.2 against 39.2).
inline bool DenseRows(DType dtype, int64_t seq_q, int64_t seq_k) {
  return dtype == DType::kBFloat16 || std::max(seq_q, seq_k) > 2 * kBlockQ;
}

// Which float32 tile products run on flash_attn's own kernels
// (TileProduct512, TileProductAvx2) rather than the backend's Gemm: all of
// them with AVX-512; with AVX2 (and FMA) those of heads of at most 128 rows,
// one tile, where OpenBLAS's Haswell kernels pay more to pack a product's
// operands than the product costs (flash_attn at B=16, T=64, 4 heads of 32,
// forward + backward, one Zen 5 core capped to AVX2: 1.66-1.68 -> 1.27-1.35
// ms); at T = 256 those kernels, on their packed operands, were faster
// (13.6-13.9 against 15.6-16.0 ms). NABLA_CPU_ISA caps the choice as it
// caps the vector width.
enum class OwnTiles { kNone, kAvx2, kAvx512 };
inline OwnTiles OwnTilesFor(DType dtype, int64_t seq_q, int64_t seq_k) {
  if (dtype != DType::kFloat32) return OwnTiles::kNone;
#if defined(__x86_64__) && defined(__GNUC__)
  switch (cpu_isa::CpuIsa()) {
    case cpu_isa::Isa::kAvx512:
      return OwnTiles::kAvx512;
    case cpu_isa::Isa::kAvx2Fma:
      return std::max(seq_q, seq_k) <= kBlockQ ? OwnTiles::kAvx2 : OwnTiles::kNone;
    default:
      return OwnTiles::kNone;
  }
#else
  return OwnTiles::kNone;
#endif
}

// Rows per band of a causal tile the diagonal crosses (ForEachRowBand):
// flash_attn's own products (OwnTilesFor) have no call cost to amortize, so
// a band is 8 rows, a block of the AVX-512 kernel's.
constexpr int64_t kBand = 32;
constexpr int64_t kOwnBand = 8;

struct AttnDims {
  int64_t batch = 0, seq_q = 0, seq_k = 0, heads = 0, dim = 0, dim_v = 0;
  int64_t offset = 0;  // causal: key j is visible to query i iff j <= i + offset
  // The row stride of a tile of scores: kBlockK, or seq_k rounded up to 16
  // where shorter, so that a short sequence's tiles are dense GEMM operands
  // (oneDNN's brgemm takes dense ones only: gemm_bench's BM_TileBf16).
  int64_t ls = kBlockK;
  bool causal = false;
  // Where float32 tile products run (OwnTilesFor).
  OwnTiles own_tiles = OwnTiles::kNone;
  // Rows (keys) per band of a causal diagonal tile (ForEachRowBand).
  int64_t band = 32;
  // A head's q, k, v and dout rows are copied dense before its products
  // (DenseRows) rather than read where they lie.
  bool dense_rows = true;
  // attn_mask is the causal pattern (IsCausalMask): causal runs instead and
  // the mask is not read, so hidden scores are never computed.
  bool mask_is_causal = false;
  double scale = 1.0;
  // attn_mask's strides over [batch, heads, seq_q, seq_k]; 0 where it broadcasts.
  int64_t mask_stride[4] = {0, 0, 0, 0};

  int64_t LdQK() const { return heads * dim; }
  int64_t LdV() const { return heads * dim_v; }
  int64_t QRow(int64_t b, int64_t i, int64_t h) const { return ((b * seq_q + i) * heads + h) * dim; }
  int64_t KRow(int64_t b, int64_t j, int64_t h) const { return ((b * seq_k + j) * heads + h) * dim; }
  int64_t VRow(int64_t b, int64_t j, int64_t h) const { return ((b * seq_k + j) * heads + h) * dim_v; }
  int64_t ORow(int64_t b, int64_t i, int64_t h) const { return ((b * seq_q + i) * heads + h) * dim_v; }
  // Keys [0, end) hold every key a query in [i0, i0 + nq) may see.
  int64_t KeyEnd(int64_t i0, int64_t nq) const {
    return causal ? std::max<int64_t>(0, std::min(seq_k, i0 + nq + offset)) : seq_k;
  }
  // How many of the keys [j0, j0 + nk) query i sees.
  int64_t Visible(int64_t i, int64_t j0, int64_t nk) const {
    return causal ? std::clamp<int64_t>(i + offset + 1 - j0, 0, nk) : nk;
  }
};

AttnDims DimsOf(const ExecutionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v) {
  AttnDims d;
  d.batch = q.Dim(0);
  d.seq_q = q.Dim(1);
  d.heads = q.Dim(2);
  d.dim = q.Dim(3);
  d.seq_k = k.Dim(1);
  d.dim_v = v.Dim(3);
  d.offset = d.seq_k - d.seq_q;
  d.ls = std::min(kBlockK, std::max<int64_t>(16, (d.seq_k + 15) / 16 * 16));
  d.causal = ctx.Attr<bool>("causal");
  d.scale = 1.0 / std::sqrt(static_cast<double>(d.dim));
  d.dense_rows = DenseRows(q.GetDType(), d.seq_q, d.seq_k);
  d.own_tiles = OwnTilesFor(q.GetDType(), d.seq_q, d.seq_k);
  d.band = d.own_tiles == OwnTiles::kNone ? kBand : kOwnBand;
  if (ctx.HasInput("attn_mask")) {
    const Tensor& mask = ctx.Input("attn_mask");
    AttnMaskStrides(mask.GetShape(), {d.batch, d.heads, d.seq_q, d.seq_k}, d.mask_stride,
                    "op '" + ctx.Op().Type() + "'");
    // A causal mask fed as data (the fusion pass turns one computed from
    // constants into causal: true itself): a scan of the mask, cheap next to
    // the attention, halves the work and keeps -1e9 scores from exp.
    d.mask_is_causal = IsCausalMask(mask, d.seq_q, d.seq_k);
    d.causal = d.causal || d.mask_is_causal;
  }
  return d;
}

// A causal tile that the diagonal crosses is cut into bands of d.band rows
// (or, for the products over its rows, of d.band keys), each product only as
// wide (or as deep) as what its band sees: in a 128 x 128 diagonal tile the
// GEMMs then do 62.5 % of the tile's multiply-adds instead of all of them,
// the zeros above the diagonal skipped. At the GPT's T = 256 two of a
// head's three tiles are diagonal. A tile every row sees whole is one band.
// 32 measured best there (float32 backward, 1 Zen 5 core: 6.2 ms; bands of
// 16, twice the calls, 6.45-6.54; of 64, more zeros multiplied, 6.76) for
// the backend's GEMM calls; flash_attn's own float32 products take 8.

// f(r0, r1, width): rows [r0, r1) of the tile see at most keys [0, width).
template <typename F>
void ForEachRowBand(const AttnDims& d, int64_t i0, int64_t nq, int64_t j0, int64_t nk, F&& f) {
  if (d.Visible(i0, j0, nk) == nk) return f(int64_t{0}, nq, nk);
  for (int64_t r0 = 0; r0 < nq; r0 += d.band) {
    const int64_t r1 = std::min(nq, r0 + d.band);
    f(r0, r1, d.Visible(i0 + r1 - 1, j0, nk));
  }
}

// f(c0, c1, r0): keys [c0, c1) of the tile are seen by rows [r0, nq) only
// (every row from the first that sees key c0 on).
template <typename F>
void ForEachKeyBand(const AttnDims& d, int64_t i0, int64_t nq, int64_t j0, int64_t nk, F&& f) {
  if (d.Visible(i0, j0, nk) == nk) return f(int64_t{0}, nk, int64_t{0});
  for (int64_t c0 = 0; c0 < nk; c0 += d.band)
    f(c0, std::min(nk, c0 + d.band), std::clamp<int64_t>(j0 + c0 - d.offset - i0, 0, nq));
}

inline void ExpRow(const float* x, float shift, float* y, int64_t n) { cpu::ExpShifted(x, shift, y, n); }
inline void ExpRow(const double* x, double shift, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift);
}

// Rows of a tile of scores become their probabilities in place, through
// the backend's row kernels (one call a tile, AVX-512 where the CPU has
// it; a call per row through the C ABI cost about 12 ns a row, 0.15 ms of
// the GPT step at T = 64): row r = exp(row - shifts[r]) over its first
// lens[r] elements, 0 on to `width`; sums[r] their sum (ExpShiftedSum's,
// its lanes in a fixed order) where sums is not null.
inline void ExpRows(float* s, int64_t ld, int64_t rows, const int64_t* lens, int64_t width, const float* shifts,
                    float* sums) {
  cpu::ExpShiftedRows(s, ld, s, ld, rows, lens, width, shifts, sums);
}
inline void ExpRows(double* s, int64_t ld, int64_t rows, const int64_t* lens, int64_t width, const double* shifts,
                    double* sums) {
  for (int64_t r = 0; r < rows; ++r) {
    double* row = s + r * ld;
    double sum = 0;
    for (int64_t c = 0; c < lens[r]; ++c) sum += row[c] = std::exp(row[c] - shifts[r]);
    std::fill(row + lens[r], row + width, 0.0);
    if (sums) sums[r] = sum;
  }
}

// out[r] = the largest of row r's first lens[r] elements, -inf for none
// (NaNs are passed over unless first, as the backend's RowMax does).
inline void RowMaxes(const float* s, int64_t ld, int64_t rows, const int64_t* lens, float* out) {
  cpu::RowMaxRows(s, ld, rows, lens, out);
}
inline void RowMaxes(const double* s, int64_t ld, int64_t rows, const int64_t* lens, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < lens[r]; ++c) m = std::max(m, s[r * ld + c]);
    out[r] = m;
  }
}

// The largest of x[0, n); -inf for n == 0 (NaNs are passed over unless
// first, as the backend's RowMax does).
inline float MaxOfRow(const float* x, int64_t n) {
  return n > 0 ? cpu::RowMax(x, n) : -std::numeric_limits<float>::infinity();
}
inline double MaxOfRow(const double* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// The arithmetic type of each storage type: bfloat16 tensors compute in
// float32 (bfloat16 GEMM operands, float32 accumulation), as PyTorch's
// autocast does.
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<bfloat16> {
  using type = float;
};

inline float ToAcc(bfloat16 x) { return Bf16ToFloat(x); }
inline float ToAcc(float x) { return x; }
inline double ToAcc(double x) { return x; }
// sum(a * b) over a row of n, in the accumulator type (float32 rows take
// the backend's DotRows, a call for many rows).
// bfloat16: eight interleaved partial sums, independent chains of adds
// (one chain waits an add's latency per element: backward's D for the GPT
// step at B=8, T=256, 8192 rows of 64, took 0.35 ms so and takes 0.1 ms).
inline float DotOfRows(const bfloat16* a, const bfloat16* b, int64_t n) {
  float part[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int j = 0; j < 8; ++j) part[j] += Bf16ToFloat(a[c + j]) * Bf16ToFloat(b[c + j]);
  float acc = 0;
  for (; c < n; ++c) acc += Bf16ToFloat(a[c]) * Bf16ToFloat(b[c]);
  for (float p : part) acc += p;
  return acc;
}
inline double DotOfRows(const double* a, const double* b, int64_t n) {
  double acc = 0;
  for (int64_t c = 0; c < n; ++c) acc += a[c] * b[c];
  return acc;
}

// out[r] = sum(a * b) over row r's n accumulators, rows ld apart: float32
// in one backend call for the tile (cpu::DotRows, vector lanes), float64 in
// plain loops.
inline void TileDots(const float* a, const float* b, int64_t ld, int64_t rows, int64_t n, float* out) {
  cpu::DotRows(a, ld, b, ld, rows, n, out);
}
inline void TileDots(const double* a, const double* b, int64_t ld, int64_t rows, int64_t n, double* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = DotOfRows(a + r * ld, b + r * ld, n);
}

// One head's rows of q (from row q0 on), k and v (from row 0) as GEMM
// operands, each ld elements apart.
template <typename T>
struct Head {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  int64_t q0 = 0, ldq = 0, ldk = 0, ldv = 0;
  // float32: k and v also (or only) transposed, so that the scores and dP
  // are products of untransposed operands (kKeysTransposed): a [dim][keys]
  // block per kBlockK keys, rows ldkt apart, blocks kt_step apart
  // (TransposedKeys).
  const T* kt = nullptr;
  const T* vt = nullptr;
  int64_t ldkt = 0, ldvt = 0, kt_step = 0, vt_step = 0;
  const T* Q(int64_t i) const { return q + (i - q0) * ldq; }
  const T* K(int64_t j) const { return k + j * ldk; }
  const T* V(int64_t j) const { return v + j * ldv; }
};

// An allocator whose resize leaves new elements default-initialized, so
// scratch that every use writes before it reads is not filled first: a
// std::vector<bfloat16> fills element by element, 2 bytes a store (with a
// task per head at 2 threads, each task's fresh packs and tile operands
// were a third to a half of bfloat16 flash_attn's own time, perf).
template <typename T>
struct NoFillAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = NoFillAllocator<U>;
  };
  NoFillAllocator() = default;
  template <typename U>
  NoFillAllocator(const NoFillAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
// Storage-type scratch: packed q, k, v, tile operands, rounded rows.
template <typename T>
using Scratch = std::vector<T, NoFillAllocator<T>>;

// Makes `buf` hold at least n elements. Never shrinks it: a resize down and
// back up would construct the regrown part again, which every tile then
// overwrites (the forward's k and v buffers change length with the query
// block).
template <typename T>
T* AtLeast(Scratch<T>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// Copies `rows` rows of `width` elements from x (rows ldx apart) to y (rows
// ldy apart). A head's row is 64 or 128 bytes (32 or 64 elements of
// bfloat16, 32 of float32): a copy of a size known here is a few vector
// moves, where memmove's call cost more than the copy (bfloat16 causal
// attention at T = 64, 16 x 4 heads of 32, forward and backward: 1.29 ->
// 1.24 ms, median of 4 alternating runs; no change at T = 256 or in float32).
template <typename T>
void CopyRows(const T* x, int64_t ldx, T* y, int64_t ldy, int64_t rows, int64_t width) {
  const size_t bytes = static_cast<size_t>(width) * sizeof(T);
  auto fixed = [&](auto n) {
    for (int64_t r = 0; r < rows; ++r) __builtin_memcpy(y + r * ldy, x + r * ldx, decltype(n)::value);
  };
  if (bytes == 64)
    fixed(std::integral_constant<size_t, 64>{});
  else if (bytes == 128)
    fixed(std::integral_constant<size_t, 128>{});
  else if (bytes == 256)
    fixed(std::integral_constant<size_t, 256>{});
  else
    for (int64_t r = 0; r < rows; ++r) std::copy_n(x + r * ldx, width, y + r * ldy);
}

// Asks the cache for `rows` rows of `width` elements, `ld` apart from `src`
// on, where a head's rows fit in kPrefetchBytes. Heads are read with rows
// heads * head_dim apart, and a short head's few rows are too few for the
// hardware prefetcher to learn the stride: its first reads (the transposing
// packs of k and v, q's and dout's first products) waited on memory, a
// third of the backward's own time at the GPT's B=16, T=64 (4 heads of 32,
// perf, 1 Zen 5 core). The backward's task asks for the next head's rows
// while it works on its own: 720 -> 660 us there (per-op minima, five
// alternating runs; no change at B=8, T=256); the forward's inputs, just
// written, are in cache. Past the budget a head's tiles outnumber its first
// reads.
constexpr int64_t kPrefetchBytes = 64 * 1024;
template <typename T>
void PrefetchRows(const T* src, int64_t rows, int64_t width, int64_t ld) {
  const int64_t bytes = width * static_cast<int64_t>(sizeof(T));
  if (rows * bytes > kPrefetchBytes) return;
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(src + r * ld);
    for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch(row + c);
  }
}

// `rows` rows of `width` elements, `ld` apart from `src` on, as a dense
// matrix: `src` itself when already dense, else copied into `buf`.
template <typename T>
const T* PackRows(const T* src, int64_t rows, int64_t width, int64_t ld, Scratch<T>& buf) {
  if (ld == width) return src;
  T* dense = AtLeast(buf, rows * width);
  CopyRows(src, ld, dense, width, rows, width);
  return dense;
}

// The rows x cols matrix x (rows ldx apart) written transposed into y
// (rows ldy apart): 4 x 4 blocks in SSE registers, the columns of x four
// at a time so that y's rows are written in runs.
inline void TransposeRowsSse(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy) {
  int64_t c = 0;
  for (; c + 4 <= cols; c += 4) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      __m128 a = _mm_loadu_ps(x + r * ldx + c), b = _mm_loadu_ps(x + (r + 1) * ldx + c);
      __m128 e = _mm_loadu_ps(x + (r + 2) * ldx + c), f = _mm_loadu_ps(x + (r + 3) * ldx + c);
      _MM_TRANSPOSE4_PS(a, b, e, f);
      _mm_storeu_ps(y + c * ldy + r, a);
      _mm_storeu_ps(y + (c + 1) * ldy + r, b);
      _mm_storeu_ps(y + (c + 2) * ldy + r, e);
      _mm_storeu_ps(y + (c + 3) * ldy + r, f);
    }
    for (; r < rows; ++r)
      for (int64_t i = 0; i < 4; ++i) y[(c + i) * ldy + r] = x[r * ldx + c + i];
  }
  for (; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) y[c * ldy + r] = x[r * ldx + c];
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same in 16 x 16 blocks of AVX-512 registers: whole 64-byte rows in
// and out, 96 instructions a block where the SSE blocks take 256. On the k
// and v packs of a causal GPT step at T = 256 (heads of 64) the backward
// took 5.68-5.86 ms against 5.97-6.18 with the SSE blocks, the forward the
// same (4 alternating runs, one Zen 5 core, per-op minima of 30 steps).
// Not inlined: the flattened baseline and AVX2 copies of the kernel
// (cpu_isa::Vectorized) must not take its body. GCC 12 warns of the
// `__Y = __Y` in its own _mm512_undefined_ps(), which the shuffle
// intrinsics pass as their unused source.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"), noinline)) void TransposeRowsAvx512(const float* x, int64_t ldx, int64_t rows,
                                                                      int64_t cols, float* y, int64_t ldy) {
  const int64_t rows16 = rows / 16 * 16, cols16 = cols / 16 * 16;
  for (int64_t c = 0; c < cols16; c += 16) {
    for (int64_t r = 0; r < rows16; r += 16) {
      __m512 t[16], u[16];
      for (int i = 0; i < 16; ++i) t[i] = _mm512_loadu_ps(x + (r + i) * ldx + c);
      // Within each 128-bit lane: pairs of rows interleaved, then groups of
      // four rows; u[4g + j]'s lane L then holds column 4L + j of rows
      // 4g .. 4g + 3.
      for (int i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_ps(t[i], t[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(t[i], t[i + 1]);
      }
      for (int g = 0; g < 16; g += 4) {
        const __m512d a = _mm512_castps_pd(u[g]), b = _mm512_castps_pd(u[g + 1]);
        const __m512d e = _mm512_castps_pd(u[g + 2]), f = _mm512_castps_pd(u[g + 3]);
        t[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, e));
        t[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, e));
        t[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, f));
        t[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, f));
      }
      // Across lanes: column 4L + j gathers lane L of t[j], t[4 + j],
      // t[8 + j], t[12 + j].
      for (int j = 0; j < 4; ++j) {
        const __m512 w0 = _mm512_shuffle_f32x4(t[j], t[4 + j], 0x44), w1 = _mm512_shuffle_f32x4(t[j], t[4 + j], 0xEE);
        const __m512 w2 = _mm512_shuffle_f32x4(t[8 + j], t[12 + j], 0x44);
        const __m512 w3 = _mm512_shuffle_f32x4(t[8 + j], t[12 + j], 0xEE);
        _mm512_storeu_ps(y + (c + j) * ldy + r, _mm512_shuffle_f32x4(w0, w2, 0x88));
        _mm512_storeu_ps(y + (c + 4 + j) * ldy + r, _mm512_shuffle_f32x4(w0, w2, 0xDD));
        _mm512_storeu_ps(y + (c + 8 + j) * ldy + r, _mm512_shuffle_f32x4(w1, w3, 0x88));
        _mm512_storeu_ps(y + (c + 12 + j) * ldy + r, _mm512_shuffle_f32x4(w1, w3, 0xDD));
      }
    }
  }
  // The rows past the last 16 of the first cols16 columns, then the columns
  // past cols16.
  TransposeRowsSse(x + rows16 * ldx, ldx, rows - rows16, cols16, y + rows16, ldy);
  TransposeRowsSse(x + cols16, ldx, rows, cols - cols16, y + cols16 * ldy, ldy);
}
#pragma GCC diagnostic pop
#endif

inline void TransposeRows(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_isa::CpuIsa() == cpu_isa::Isa::kAvx512) return TransposeRowsAvx512(x, ldx, rows, cols, y, ldy);
#endif
  TransposeRowsSse(x, ldx, rows, cols, y, ldy);
}

// float32 scores q k^T and dP = dO v^T as products of untransposed operands,
// on k and v packed transposed: OpenBLAS's small kernels for a transposed
// B are its slow ones (gemm_bench, one Zen 5 core, GFLOP/s: 32 x 128 x 64
// 110 with B transposed, 210 without; flash_attn's causal bands are such
// products). The transposing pack replaces the copy where the rows
// themselves are not needed (k in forward, v in backward).
template <typename T>
constexpr bool kKeysTransposed = std::is_same_v<T, float>;

// What of a head's k and v a kernel reads: as rows, transposed, or both.
struct HeadParts {
  bool k_rows = true, k_t = false, v_rows = true, v_t = false;
};
// Forward: scores from k^T, out from v's rows. Backward: scores from k^T,
// dQ from k's rows, dP from v^T.
constexpr HeadParts kForwardParts{false, true, true, false};
constexpr HeadParts kBackwardParts{true, true, false, true};

// `rows` rows of a head from `src` on (`ld` apart) as a GEMM operand: a
// dense copy in `buf` (d.dense_rows) or the rows where they lie; *ld_out
// is its row stride.
template <typename T>
const T* HeadRows(const AttnDims& d, const T* src, int64_t rows, int64_t width, int64_t ld, Scratch<T>& buf,
                  int64_t* ld_out) {
  if (d.dense_rows) {
    *ld_out = width;
    return PackRows(src, rows, width, ld, buf);
  }
  *ld_out = ld;
  return src;
}

// Rows [0, nk) of a head's k or v (`width` wide, `ld` apart) transposed, a
// [width][keys] block per kBlockK keys: rows *ldt apart (kBlockK, or nk
// where shorter), blocks *step apart. One [width][nk] transpose had rows
// nk apart, and from T = 256 a tile product's k steps over them fell on
// few L1 sets (rows 1 KiB apart at T = 256, 8 KiB at T = 2048): flash_attn
// alone, forward + backward, one Zen 5 core, per-op minima of alternating
// runs: non-causal T = 2048, 4 heads of 64, 120 -> 112 ms; causal T =
// 1024, 8 heads of 64, 31.7 -> 29.8 ms.
inline const float* TransposedKeys(const float* src, int64_t ld, int64_t nk, int64_t width, Scratch<float>& buf,
                                   int64_t* ldt, int64_t* step) {
  *ldt = std::min(nk, kBlockK);
  *step = width * *ldt;
  float* t = AtLeast(buf, (nk + kBlockK - 1) / kBlockK * *step);
  for (int64_t j0 = 0; j0 < nk; j0 += kBlockK)
    TransposeRows(src + j0 * ld, ld, std::min(kBlockK, nk - j0), width, t + j0 / kBlockK * *step, *ldt);
  return t;
}

// Head (b, h) with q rows [i0, i0 + nq) and k, v rows [0, nk) as operands
// (HeadRows), or transposed as `parts` asks where kKeysTransposed.
template <typename T>
Head<T> PackHead(const AttnDims& d, const T* q, const T* k, const T* v, int64_t b, int64_t h, int64_t i0, int64_t nq,
                 int64_t nk, HeadParts parts, Scratch<T> (&buf)[5]) {
  if constexpr (!kKeysTransposed<T>) parts = HeadParts{};
  Head<T> hd;
  hd.q = HeadRows(d, q + d.QRow(b, i0, h), nq, d.dim, d.LdQK(), buf[0], &hd.ldq);
  hd.ldk = d.dim;
  hd.ldv = d.dim_v;
  if (parts.k_rows) hd.k = HeadRows(d, k + d.KRow(b, 0, h), nk, d.dim, d.LdQK(), buf[1], &hd.ldk);
  if (parts.v_rows) hd.v = HeadRows(d, v + d.VRow(b, 0, h), nk, d.dim_v, d.LdV(), buf[2], &hd.ldv);
  hd.q0 = i0;
  if constexpr (kKeysTransposed<T>) {
    if (parts.k_t) hd.kt = TransposedKeys(k + d.KRow(b, 0, h), d.LdQK(), nk, d.dim, buf[3], &hd.ldkt, &hd.kt_step);
    if (parts.v_t) hd.vt = TransposedKeys(v + d.VRow(b, 0, h), d.LdV(), nk, d.dim_v, buf[4], &hd.ldvt, &hd.vt_step);
  }
  return hd;
}

#if defined(__x86_64__) && defined(__GNUC__)
// float32 tile products on the head's operands where they lie, in vector
// registers: rows of C in blocks of R, two vectors of columns at a time,
// each element of op(A) broadcast (so a transposed A costs nothing) against
// a row of B. Every tile product of flash_attn has an untransposed B (k and
// v are packed transposed where the scores and dP need them). A tile
// product here is a few hundred nanoseconds; through the backend's Gemm it
// also paid the C ABI, SplitGemm and OpenBLAS's dispatch, and with
// OpenBLAS's Haswell kernels (AVX2 CPUs, or a Zen 4 given
// OPENBLAS_CORETYPE=Haswell) its packing of both operands, which halved the
// throughput of these tiles. Causal tiles were also cut into bands of 32
// rows to keep the calls few, a third of a diagonal tile's multiply-adds
// spent on hidden scores; here a band is 8 rows (kOwnBand). flash_attn
// alone, causal, forward + backward, per-op minima on one Zen 5 core: B=16,
// T=64, 4 heads of 32, 0.81 ms on OpenBLAS's SkylakeX small-matrix kernels,
// 1.54-1.61 on its Haswell ones, 0.73-0.77 here; B=8, T=256, 4 heads of
// 64, 7.3-7.4 ms on SkylakeX, 6.4-6.8 here. Each C element is one chain of
// FMAs over k in order (OpenBLAS's small kernels gave the same bits on the
// sizes tried); beta 0 never reads C.
// The generic templates below pass vectors by value before flatten puts
// them inside their target functions; GCC warns of that ABI (-Wpsabi)
// though no such call is left.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
struct Avx512Lanes {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int kWidth = 16;
  static constexpr int kRows = 8;  // 16 accumulators of 32 registers
  __attribute__((target("avx512f"))) static Mask Tail(int64_t w) {
    return w >= 16 ? Mask(0xFFFF) : w <= 0 ? Mask(0) : static_cast<Mask>((1u << w) - 1);
  }
  __attribute__((target("avx512f"))) static V Load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  __attribute__((target("avx512f"))) static void Store(Mask m, float* p, V x) { _mm512_mask_storeu_ps(p, m, x); }
  __attribute__((target("avx512f"))) static V Zero() { return _mm512_setzero_ps(); }
  __attribute__((target("avx512f"))) static V Set(float x) { return _mm512_set1_ps(x); }
  __attribute__((target("avx512f"))) static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  __attribute__((target("avx512f"))) static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
struct Avx2Lanes {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int kWidth = 8;
  static constexpr int kRows = 6;  // 12 accumulators of 16 registers, two loads and a broadcast beside them
  __attribute__((target("avx2,fma"))) static Mask Tail(int64_t w) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(w, 0, 8))), lane);
  }
  __attribute__((target("avx2,fma"))) static V Load(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
  __attribute__((target("avx2,fma"))) static void Store(Mask m, float* p, V x) { _mm256_maskstore_ps(p, m, x); }
  __attribute__((target("avx2,fma"))) static V Zero() { return _mm256_setzero_ps(); }
  __attribute__((target("avx2,fma"))) static V Set(float x) { return _mm256_set1_ps(x); }
  __attribute__((target("avx2,fma"))) static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  __attribute__((target("avx2,fma"))) static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};

// R rows of C: C[r][0, n) = alpha sum_l a[r * a_row + l * a_col] b[l][0, n)
// + beta C[r][0, n).
template <typename L, int R>
inline void ProductRows(int64_t n, int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
                        int64_t ldb, float beta, float* c, int64_t ldc) {
  using V = typename L::V;
  constexpr int64_t kW = L::kWidth;
  const V va = L::Set(alpha), vb = L::Set(beta);
  int64_t j = 0;
  for (; j + kW < n; j += 2 * kW) {
    const auto m0 = L::Tail(n - j), m1 = L::Tail(n - j - kW);
    V acc0[R], acc1[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = L::Zero();
    const float* bp = b + j;
    const float* ap = a;
    for (int64_t l = 0; l < k; ++l, bp += ldb, ap += a_col) {
      const V b0 = L::Load(m0, bp), b1 = L::Load(m1, bp + kW);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const V x = L::Set(ap[r * a_row]);
        acc0[r] = L::Fma(x, b0, acc0[r]);
        acc1[r] = L::Fma(x, b1, acc1[r]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* cp = c + r * ldc + j;
      V o0 = L::Mul(acc0[r], va), o1 = L::Mul(acc1[r], va);
      if (beta != 0.0f) {
        o0 = L::Fma(L::Load(m0, cp), vb, o0);
        o1 = L::Fma(L::Load(m1, cp + kW), vb, o1);
      }
      L::Store(m0, cp, o0);
      L::Store(m1, cp + kW, o1);
    }
  }
  if (j >= n) return;
  // One vector of columns left (a causal band's narrow end, or n <= kW).
  const auto m0 = L::Tail(n - j);
  V acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = L::Zero();
  const float* bp = b + j;
  const float* ap = a;
  for (int64_t l = 0; l < k; ++l, bp += ldb, ap += a_col) {
    const V b0 = L::Load(m0, bp);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = L::Fma(L::Set(ap[r * a_row]), b0, acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cp = c + r * ldc + j;
    V o = L::Mul(acc[r], va);
    if (beta != 0.0f) o = L::Fma(L::Load(m0, cp), vb, o);
    L::Store(m0, cp, o);
  }
}

// C[m x n] = alpha op(A) B + beta C, op(A)(i, l) = a[i * lda + l], or
// a[l * lda + i] when ta: blocks of L::kRows rows, then the rest.
template <typename L, int R = L::kRows>
inline void ProductBlocks(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col,
                          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if constexpr (R == L::kRows) {
    for (; m >= R; m -= R, a += R * a_row, c += R * ldc)
      ProductRows<L, R>(n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
  }
  if constexpr (R > 0) {
    if (m == R) return ProductRows<L, R>(n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
    if constexpr (R > 1) ProductBlocks<L, R - 1>(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
  }
}

__attribute__((target("avx512f"), flatten, noinline)) void TileProduct512(int64_t m, int64_t n, int64_t k, float alpha,
                                                                          const float* a, int64_t a_row, int64_t a_col,
                                                                          const float* b, int64_t ldb, float beta,
                                                                          float* c, int64_t ldc) {
  ProductBlocks<Avx512Lanes>(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
}
__attribute__((target("avx2,fma"), flatten, noinline)) void TileProductAvx2(int64_t m, int64_t n, int64_t k,
                                                                            float alpha, const float* a, int64_t a_row,
                                                                            int64_t a_col, const float* b, int64_t ldb,
                                                                            float beta, float* c, int64_t ldc) {
  ProductBlocks<Avx2Lanes>(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
}
#pragma GCC diagnostic pop
#endif

// C (accumulator type) = alpha op(A) op(B) + beta C on storage-type operands.
inline void TileGemm(const AttnDims& d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!tb && d.own_tiles != OwnTiles::kNone) {
    const int64_t a_row = ta ? 1 : lda, a_col = ta ? lda : 1;
    if (d.own_tiles == OwnTiles::kAvx512) return TileProduct512(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
    return TileProductAvx2(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
  }
#endif
  cpu::Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void TileGemm(const AttnDims&, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                     int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cpu::Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void TileGemm(const AttnDims&, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                     int64_t lda, const bfloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cpu::GemmBf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// c[rows x width] = alpha a[rows x depth] b[j0 .. j0 + width)^T for a head's
// k or v, keys within one kBlockK block: from its transposed pack bt (rows
// ldbt apart, blocks bt_step apart: TransposedKeys) where the head has one
// (kKeysTransposed), else from its rows b. Nothing for width 0.
template <typename T, typename A>
void TimesRowsT(const AttnDims& d, int64_t rows, int64_t width, int64_t depth, A alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, const T* bt, int64_t ldbt, int64_t bt_step, int64_t j0, A* c, int64_t ldc) {
  if (width <= 0) return;
  if (bt)
    TileGemm(d, false, false, rows, width, depth, alpha, a, lda, bt + j0 / kBlockK * bt_step + j0 % kBlockK, ldbt, A(0),
             c, ldc);
  else
    TileGemm(d, false, true, rows, width, depth, alpha, a, lda, b + j0 * ldb, ldb, A(0), c, ldc);
}

// A tile of `rows` rows of `ld` accumulators as storage-type GEMM operands
// (row stride ld): the tile itself when the types agree, else rounded into
// `buf`.
template <typename T, typename A>
const T* AsOperand(const A* tile, int64_t rows, int64_t ld, Scratch<T>& buf) {
  if constexpr (std::is_same_v<T, A>) {
    return tile;
  } else {
    // One call for the whole rows, the columns past the tile's keys too
    // (the GEMM reads none of them; every tile buffer starts zeroed, so they
    // hold finite leftovers): a call per row cost more than its rounding
    // where rows are short (64 keys at T = 64).
    T* rounded = AtLeast(buf, rows * ld);
    cpu::ConvertToBf16(tile, rounded, rows * ld);
    return rounded;
  }
}

// s[nq x nk] (row stride d.ls) = scale * q[i0..] k[j0..]^T + attn_mask for
// batch b, head h. Hidden (causal) entries are left as they are, unwritten
// past each row band's width: callers read only each row's Visible() prefix.
// Forward and backward score a tile by this one function, so the same bits.
template <typename T, typename A = typename AccOf<T>::type>
void Scores(const AttnDims& d, const Head<T>& hd, const T* mask, int64_t b, int64_t h, int64_t i0, int64_t nq,
            int64_t j0, int64_t nk, A* s) {
  ForEachRowBand(d, i0, nq, j0, nk, [&](int64_t r0, int64_t r1, int64_t width) {
    TimesRowsT(d, r1 - r0, width, d.dim, static_cast<A>(d.scale), hd.Q(i0 + r0), hd.ldq, hd.k, hd.ldk, hd.kt, hd.ldkt,
               hd.kt_step, j0, s + r0 * d.ls, d.ls);
  });
  if (!mask) return;
  const int64_t* ms = d.mask_stride;
  for (int64_t r = 0; r < nq; ++r) {
    const T* mrow = mask + b * ms[0] + h * ms[1] + (i0 + r) * ms[2] + j0 * ms[3];
    A* srow = s + r * d.ls;
    const int64_t len = d.Visible(i0 + r, j0, nk);
    if (ms[3] == 0)
      for (int64_t c = 0; c < len; ++c) srow[c] += ToAcc(mrow[0]);
    else
      for (int64_t c = 0; c < len; ++c) srow[c] += ToAcc(mrow[c]);
  }
}

template <typename T>
const T* MaskData(const ExecutionContext& ctx, const AttnDims& d) {
  return ctx.HasInput("attn_mask") && !d.mask_is_causal ? ctx.Input("attn_mask").Data<T>() : nullptr;
}

// softmax_lse = m + log(l) cannot hold log(l) once |m| is large: where an
// additive mask shifts every score of a row by -1e9 (a query that sees only
// masked keys), float32's -1e9 + log(257) is -1e9, and exp(s - lse) would
// make every probability 1 in place of 1/257 (the forward's own are right:
// it keeps m and l apart). Rows whose |lse| reaches LseRecomputeBound take
// their probabilities as exp(s - m) / l with m and l found again.
template <typename A>
bool LseTooLarge(A lse) {
  return std::abs(lse) >= LseRecomputeBound<A>() && std::abs(lse) != std::numeric_limits<A>::infinity();
}

// What the probabilities of rows [i0, i0 + nq) of head (b, h) are made of:
// P = exp(s - shift[r]) * inv[r], that is shift = lse and inv = 1, except
// for the rows LseTooLarge flags, whose max and sum are found again from
// the key tiles the forward scored (the same calls, so the same scores bit
// for bit): shift = m, inv = 1 / l. `s` is a tile's scratch.
template <typename T, typename A>
void RowShifts(const AttnDims& d, const Head<T>& hd, const T* mask, int64_t b, int64_t h, int64_t i0, int64_t nq,
               const A* lse, A* shift, A* inv, A* s) {
  bool any = false;
  for (int64_t r = 0; r < nq; ++r) {
    shift[r] = lse[r];
    inv[r] = A(1);
    any = any || LseTooLarge(lse[r]);
  }
  if (!any) return;
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  std::vector<A> m(static_cast<size_t>(nq), kNegInf), l(static_cast<size_t>(nq), A(0));
  const int64_t key_end = d.KeyEnd(i0, nq);
  for (int64_t j0 = 0; j0 < key_end; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, key_end - j0);
    Scores(d, hd, mask, b, h, i0, nq, j0, nk, s);
    for (int64_t r = 0; r < nq; ++r) {
      if (!LseTooLarge(lse[r])) continue;
      A* srow = s + r * d.ls;
      const int64_t len = d.Visible(i0 + r, j0, nk);
      const A m_new = std::max(m[r], MaxOfRow(srow, len));
      if (m_new == kNegInf) continue;
      if (m_new != m[r]) {
        l[r] = m[r] == kNegInf ? A(0) : l[r] * std::exp(m[r] - m_new);
        m[r] = m_new;
      }
      ExpRow(srow, m_new, srow, len);
      for (int64_t c = 0; c < len; ++c) l[r] += srow[c];
    }
  }
  for (int64_t r = 0; r < nq; ++r) {
    if (!LseTooLarge(lse[r]) || l[r] == A(0)) continue;
    shift[r] = m[r];
    inv[r] = A(1) / l[r];
  }
}

// Writes n accumulators as storage type.
template <typename T, typename A>
void Store(const A* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, A>)
    std::copy(x, x + n, y);
  else
    cpu::ConvertToBf16(x, y, n);
}

// Writes `rows` dense rows of `width` accumulators as storage-type rows `ld`
// apart: bfloat16 rounded in one call into `buf` first, then copied (a
// conversion call per row cost more than its work for short rows).
template <typename T, typename A>
void StoreRows(const A* x, int64_t rows, int64_t width, T* y, int64_t ld, Scratch<T>& buf) {
  const T* src;
  if constexpr (std::is_same_v<T, A>) {
    src = x;
  } else {
    T* rounded = AtLeast(buf, rows * width);
    cpu::ConvertToBf16(x, rounded, rows * width);
    src = rounded;
  }
  CopyRows(src, width, y, ld, rows, width);
}

template <typename T>
void FlashAttnKernel(const ExecutionContext& ctx) {
  using A = typename AccOf<T>::type;
  const Tensor& tq = ctx.Input("q");
  const Tensor& tk = ctx.Input("k");
  const Tensor& tv = ctx.Input("v");
  const AttnDims d = DimsOf(ctx, tq, tk, tv);
  const T* q = tq.Data<T>();
  const T* k = tk.Data<T>();
  const T* v = tv.Data<T>();
  const T* mask = MaskData<T>(ctx, d);
  const AttnDropout dropout = ForwardDropout(ctx);
  Device& dev = ctx.GetDevice();
  T* out = ctx.Output("out")->Allocate<T>(dev, {d.batch, d.seq_q, d.heads, d.dim_v});
  A* lse = ctx.Output("softmax_lse")->Allocate<A>(dev, {d.batch, d.heads, d.seq_q});
  Tensor* softmax = ctx.Output("softmax");
  T* probs = nullptr;
  if (softmax && ctx.Attr<bool>("return_softmax"))
    probs = softmax->Allocate<T>(dev, {d.batch, d.heads, d.seq_q, d.seq_k});
  else if (softmax)
    softmax->Allocate<T>(dev, {0});  // Paddle's empty softmax without return_softmax
  if (Tensor* seed_offset = ctx.Output("seed_offset")) {
    // What backward draws the mask from; [0, 0] when no dropout runs.
    int64_t* so = seed_offset->Allocate<int64_t>(dev, {2});
    so[0] = static_cast<int64_t>(dropout.seed);
    so[1] = dropout.offset;
  }
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  const int64_t q_blocks = (d.seq_q + kBlockQ - 1) / kBlockQ;
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<A> s(kBlockQ * d.ls), acc(kBlockQ * d.dim_v), m(kBlockQ), l(kBlockQ), z(kBlockK);
    std::vector<A> shifts(kBlockQ), sums(kBlockQ);
    std::vector<int64_t> lens(kBlockQ);
    Scratch<T> s_op, packed[5], out_op;
    Head<T> keys;
    int64_t keys_bh = -1;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_blocks;
      const int64_t b = bh / d.heads, h = bh % d.heads;
      const int64_t i0 = (task % q_blocks) * kBlockQ;
      const int64_t nq = std::min(kBlockQ, d.seq_q - i0);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), A(0));
      std::fill(acc.begin(), acc.end(), A(0));
      const int64_t key_end = d.KeyEnd(i0, nq);
      // A head's keys are packed once for the query blocks of it that this
      // thread runs one after another, as many as the last of them sees
      // (once per block, non-causal T = 1024 repacked all of k and v eight
      // times: 13 of its 157 ms in the transposes and copies).
      if (bh != keys_bh) {
        const int64_t last_i0 = (std::min(end, (bh + 1) * q_blocks) - 1) % q_blocks * kBlockQ;
        keys = PackHead(d, q, k, v, b, h, 0, 0, d.KeyEnd(last_i0, std::min(kBlockQ, d.seq_q - last_i0)), kForwardParts,
                        packed);
        keys_bh = bh;
      }
      Head<T> hd = keys;
      hd.q = HeadRows(d, q + d.QRow(b, i0, h), nq, d.dim, d.LdQK(), packed[0], &hd.ldq);
      hd.q0 = i0;
      for (int64_t j0 = 0; j0 < key_end; j0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, key_end - j0);
        Scores(d, hd, mask, b, h, i0, nq, j0, nk, s.data());
        for (int64_t r = 0; r < nq; ++r) lens[r] = d.Visible(i0 + r, j0, nk);
        RowMaxes(s.data(), d.ls, nq, lens.data(), shifts.data());
        for (int64_t r = 0; r < nq; ++r) {
          shifts[r] = std::max(m[r], shifts[r]);
          if (shifts[r] == kNegInf) lens[r] = 0;  // a row that has seen nothing yet gets zeros
        }
        ExpRows(s.data(), d.ls, nq, lens.data(), nk, shifts.data(), sums.data());
        for (int64_t r = 0; r < nq; ++r) {
          A* srow = s.data() + r * d.ls;
          const int64_t len = lens[r];
          const A m_new = shifts[r], sum = sums[r];
          if (m_new == kNegInf) continue;
          if (dropout.on) {  // l sums the probabilities before dropout, the output those after
            DropoutFactors(dropout, bh, i0 + r, j0, len, z.data());
            for (int64_t c = 0; c < len; ++c) srow[c] *= z[c];
          }
          if (m_new != m[r]) {
            const A alpha = m[r] == kNegInf ? A(0) : std::exp(m[r] - m_new);
            A* arow = acc.data() + r * d.dim_v;
            for (int64_t c = 0; c < d.dim_v; ++c) arow[c] *= alpha;
            l[r] *= alpha;
            m[r] = m_new;
          }
          l[r] += sum;
        }
        const T* s_used = AsOperand(s.data(), nq, d.ls, s_op);
        ForEachRowBand(d, i0, nq, j0, nk, [&](int64_t r0, int64_t r1, int64_t width) {
          TileGemm(d, false, false, r1 - r0, d.dim_v, width, A(1), s_used + r0 * d.ls, d.ls, hd.V(j0), hd.ldv, A(1),
                   acc.data() + r0 * d.dim_v, d.dim_v);
        });
      }
      for (int64_t r = 0; r < nq; ++r) {
        A* arow = acc.data() + r * d.dim_v;
        const A inv = l[r] == A(0) ? A(0) : A(1) / l[r];
        for (int64_t c = 0; c < d.dim_v; ++c) arow[c] *= inv;
        lse[bh * d.seq_q + i0 + r] = l[r] == A(0) ? kNegInf : m[r] + std::log(l[r]);
      }
      StoreRows(acc.data(), nq, d.dim_v, out + d.ORow(b, i0, h), d.LdV(), out_op);
      if (!probs) continue;
      // The [seq_q, seq_k] probabilities only when asked for (return_softmax).
      for (int64_t j0 = 0; j0 < d.seq_k; j0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, d.seq_k - j0);
        if (j0 < key_end) Scores(d, hd, mask, b, h, i0, nq, j0, nk, s.data());
        for (int64_t r = 0; r < nq; ++r) {
          A* srow = s.data() + r * d.ls;
          const A row_lse = lse[bh * d.seq_q + i0 + r];
          const int64_t len = j0 < key_end && row_lse != kNegInf ? d.Visible(i0 + r, j0, nk) : 0;
          if (LseTooLarge(row_lse)) {  // this row's m and l are at hand
            ExpRow(srow, m[r], srow, len);
            for (int64_t c = 0; c < len; ++c) srow[c] /= l[r];
          } else {
            ExpRow(srow, row_lse, srow, len);
          }
          std::fill(srow + len, srow + nk, A(0));
          if (dropout.on) {  // the probabilities out was made of
            DropoutFactors(dropout, bh, i0 + r, j0, len, z.data());
            for (int64_t c = 0; c < len; ++c) srow[c] *= z[c];
          }
          Store(srow, probs + (bh * d.seq_q + i0 + r) * d.seq_k + j0, nk);
        }
      }
    }
  };
  // Its loops at the CPU's vector width (nabla/cpu_vectorized.h).
  cpu::ParallelFor(d.batch * d.heads * q_blocks, 1,
                   [&](int64_t begin, int64_t end) { cpu_isa::Vectorized([&] { run(begin, end); }); });
}

// Zeros rows [t0, t1) of a dense head `width` wide.
template <typename A>
void ZeroRows(A* x, int64_t t0, int64_t t1, int64_t width, int64_t ld) {
  for (int64_t t = t0; t < t1; ++t) std::fill(x + t * ld, x + t * ld + width, A(0));
}

// A dense head's accumulators written as head (b, h) of a [batch, seq,
// heads, width] tensor.
template <typename T, typename A>
void StoreHead(const A* x, T* y, int64_t b, int64_t h, int64_t seq, int64_t heads, int64_t width, Scratch<T>& buf) {
  StoreRows(x, seq, width, y + (b * seq * heads + h) * width, heads * width, buf);
}

template <typename T>
void FlashAttnGradKernel(const ExecutionContext& ctx) {
  using A = typename AccOf<T>::type;
  const Tensor& tq = ctx.Input("q");
  const Tensor& tk = ctx.Input("k");
  const Tensor& tv = ctx.Input("v");
  const AttnDims d = DimsOf(ctx, tq, tk, tv);
  const T* q = tq.Data<T>();
  const T* k = tk.Data<T>();
  const T* v = tv.Data<T>();
  const T* o = ctx.Input("out").Data<T>();
  const A* lse = ctx.Input("softmax_lse").Data<A>();
  const T* dout = ctx.Input(GradVarName("out")).Data<T>();
  const T* mask = MaskData<T>(ctx, d);
  const AttnDropout dropout = BackwardDropout(ctx);
  Device& dev = ctx.GetDevice();
  // force_fp32_output (bfloat16 q; FoldBf16Casts sets it): the gradients are
  // the float32 accumulators themselves, never rounded.
  const bool wide_out = !std::is_same_v<T, A> && ForcesFp32Output(ctx);
  T* dq = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
  A* wide[3] = {nullptr, nullptr, nullptr};
  const std::pair<const char*, const Tensor*> slots[3] = {{"q", &tq}, {"k", &tk}, {"v", &tv}};
  T** narrow[3] = {&dq, &dk, &dv};
  for (int i = 0; i < 3; ++i) {
    Tensor* t = ctx.Output(GradVarName(slots[i].first));
    if (!t) continue;
    if (wide_out)
      wide[i] = t->Allocate<A>(dev, slots[i].second->GetShape());
    else
      *narrow[i] = t->Allocate<T>(dev, slots[i].second->GetShape());
  }
  if (!dq && !dk && !dv && !wide[0] && !wide[1] && !wide[2]) return;
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  // D = rowsum(dO * O) for every row first, in one pass over out and dout
  // in their own order, which the hardware prefetches. Per head, the rows
  // are heads * head_dim apart and out has long left the cache: at the
  // GPT's B=16, T=64 (4 heads of 32) those dots, taken row by row in each
  // head's task, were 46 % of the backward's own time (perf, 1 Zen 5 core).
  // Where keys are few (seq_k <= kFlashAttnShortKeys, one tile) D is instead
  // rowsum(P * Z * dP) over the tile, the unfused softmax's own form, from
  // the very P and dP that dS is made of: then sum_j dS_ij is 0 up to that
  // sum's rounding and, with one key (P = 1), dS is exactly 0 as the true
  // gradient is, where rowsum(dO * O) rounds another way (k's gradient at
  // seq_k = 1, exactly 0, came out as 3e-6 noise). Longer rows keep the
  // pass: there it costs less than the dots a tile at a time (and reads
  // dout ahead of the heads' strided reads), the GPT's T = 64 backward
  // 606-634 against 645-666 us, and the two D differ by rounding alone.
  const bool tile_dots = d.seq_k <= kFlashAttnShortKeys;
  std::vector<A> dots(tile_dots ? 0 : static_cast<size_t>(d.batch * d.heads * d.seq_q));
  if (!tile_dots)
    cpu::ParallelFor(d.batch * d.seq_q, 64, [&](int64_t begin, int64_t end) {
      // float32: one backend call for the task's rows (a call per row through
      // the C ABI was most of this pass), then each to its head's place.
      std::vector<float> row_dots;
      if constexpr (std::is_same_v<T, float>) {
        row_dots.resize(static_cast<size_t>((end - begin) * d.heads));
        cpu::DotRows(o + begin * d.LdV(), d.dim_v, dout + begin * d.LdV(), d.dim_v, (end - begin) * d.heads, d.dim_v,
                     row_dots.data());
      }
      for (int64_t bt = begin; bt < end; ++bt) {
        const int64_t b = bt / d.seq_q, i = bt % d.seq_q;
        for (int64_t h = 0; h < d.heads; ++h) {
          A& dot = dots[(b * d.heads + h) * d.seq_q + i];
          if constexpr (std::is_same_v<T, float>)
            dot = row_dots[(bt - begin) * d.heads + h];
          else
            dot = DotOfRows(o + d.ORow(b, i, h), dout + d.ORow(b, i, h), d.dim_v);
        }
      }
    });
  // One task per (batch, head): it owns that head's rows of dq, dk and dv
  // and accumulates them in place (float32, float64) or densely in its own
  // scratch, written out once (bfloat16, wide gradients).
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<A> p(kBlockQ * d.ls), dp(kBlockQ * d.ls), shift(d.seq_q), inv(d.seq_q), tile_dot(kBlockQ);
    std::vector<int64_t> lens(kBlockQ);
    // Dense scratch for a head's gradients where they are not accumulated in
    // place (below): bfloat16 or wide ones, or a gradient nobody asked for.
    constexpr bool kInPlace = std::is_same_v<T, A>;
    auto scratch = [&](const T* out, int64_t n) { return static_cast<size_t>(kInPlace && out ? 0 : n); };
    std::vector<A> gq(scratch(dq, d.seq_q * d.dim)), gk(scratch(dk, d.seq_k * d.dim)),
        gv(scratch(dv, d.seq_k * d.dim_v));
    // With dropout: its factors and the dropped probabilities P * Z.
    std::vector<A> z(dropout.on ? kBlockQ * d.ls : 0), pz(dropout.on ? kBlockQ * d.ls : 0);
    Scratch<T> p_op, dp_op, packed[5], dout_buf, narrow_buf;
    Scratch<A> wide_buf;  // never filled: wide gradients are copied as they are
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / d.heads, h = bh % d.heads;
      const A* row_lse = lse + bh * d.seq_q;
      const Head<T> hd = PackHead(d, q, k, v, b, h, 0, d.seq_q, d.seq_k, kBackwardParts, packed);
      if (bh + 1 < end) {
        const int64_t nb = (bh + 1) / d.heads, nh = (bh + 1) % d.heads;
        PrefetchRows(q + d.QRow(nb, 0, nh), d.seq_q, d.dim, d.LdQK());
        PrefetchRows(k + d.KRow(nb, 0, nh), d.seq_k, d.dim, d.LdQK());
        PrefetchRows(v + d.VRow(nb, 0, nh), d.seq_k, d.dim_v, d.LdV());
        PrefetchRows(dout + d.ORow(nb, 0, nh), d.seq_q, d.dim_v, d.LdV());
      }
      int64_t ld_dout = 0;
      const T* dout_h = HeadRows(d, dout + d.ORow(b, 0, h), d.seq_q, d.dim_v, d.LdV(), dout_buf, &ld_dout);
      const A* row_dot = tile_dots ? nullptr : dots.data() + bh * d.seq_q;
      for (int64_t i0 = 0; i0 < d.seq_q; i0 += kBlockQ)
        RowShifts(d, hd, mask, b, h, i0, std::min(kBlockQ, d.seq_q - i0), row_lse + i0, shift.data() + i0,
                  inv.data() + i0, p.data());
      // No zeroing pass: the first product into each gradient tile
      // overwrites it (beta 0). The first key tile reaches every query tile
      // that sees any key; the query rows before it (causal with seq_q >
      // seq_k) and a key tile no query sees are zeroed here.
      const int64_t seen = d.seq_k == 0 ? d.seq_q : d.causal ? std::max<int64_t>(0, -d.offset) / kBlockQ * kBlockQ : 0;
      // Where a gradient's storage type is the accumulator's (float32,
      // float64), the head's rows are accumulated where the gradient lies,
      // heads * width apart: no scratch to copy out afterwards (the GPT's
      // T = 256 backward, 8 x 4 heads of 64: 6.52-6.57 -> 6.21-6.28 ms). The
      // inputs a head reads are its packed copies and its own columns, which
      // no other head's gradient rows touch.
      A* aq = gq.data();
      A* ak = gk.data();
      A* av = gv.data();
      int64_t lq = d.dim, lk = d.dim, lv = d.dim_v;
      bool direct[3] = {false, false, false};
      if constexpr (kInPlace) {
        if (dq) aq = dq + d.QRow(b, 0, h), lq = d.LdQK(), direct[0] = true;
        if (dk) ak = dk + d.KRow(b, 0, h), lk = d.LdQK(), direct[1] = true;
        if (dv) av = dv + d.VRow(b, 0, h), lv = d.LdV(), direct[2] = true;
      }
      ZeroRows(aq, 0, std::min(seen, d.seq_q), d.dim, lq);
      for (int64_t j0 = 0; j0 < d.seq_k; j0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, d.seq_k - j0);
        // Causal: the first query that sees key j0 is j0 - offset.
        const int64_t first = d.causal ? std::max<int64_t>(0, j0 - d.offset) / kBlockQ * kBlockQ : 0;
        if (first >= d.seq_q) {
          ZeroRows(ak, j0, j0 + nk, d.dim, lk);
          ZeroRows(av, j0, j0 + nk, d.dim_v, lv);
        }
        for (int64_t i0 = first; i0 < d.seq_q; i0 += kBlockQ) {
          const A beta_kv = i0 == first ? A(0) : A(1), beta_q = j0 == 0 ? A(0) : A(1);
          const int64_t nq = std::min(kBlockQ, d.seq_q - i0);
          Scores(d, hd, mask, b, h, i0, nq, j0, nk, p.data());
          for (int64_t r = 0; r < nq; ++r) lens[r] = row_lse[i0 + r] == kNegInf ? 0 : d.Visible(i0 + r, j0, nk);
          ExpRows(p.data(), d.ls, nq, lens.data(), nk, shift.data() + i0, static_cast<A*>(nullptr));
          for (int64_t r = 0; r < nq; ++r) {
            A* prow = p.data() + r * d.ls;
            if (inv[i0 + r] != A(1))
              for (int64_t c = 0; c < lens[r]; ++c) prow[c] *= inv[i0 + r];
            if (dropout.on) {
              A* zrow = z.data() + r * d.ls;
              DropoutFactors(dropout, bh, i0 + r, j0, nk, zrow);
              for (int64_t c = 0; c < nk; ++c) pz[r * d.ls + c] = prow[c] * zrow[c];
            }
          }
          const T* dout_blk = dout_h + i0 * ld_dout;
          const A* p_used = dropout.on ? pz.data() : p.data();
          // Key bands: dV's rows [c0, c1) sum over the query rows that see
          // them, [r0, nq); no such row (r0 == nq) is an empty sum.
          const T* p_op_used = AsOperand(p_used, nq, d.ls, p_op);
          ForEachKeyBand(d, i0, nq, j0, nk, [&](int64_t c0, int64_t c1, int64_t r0) {
            TileGemm(d, true, false, c1 - c0, d.dim_v, nq - r0, A(1), p_op_used + r0 * d.ls + c0, d.ls,
                     dout_blk + r0 * ld_dout, ld_dout, beta_kv, av + (j0 + c0) * lv, lv);
          });
          ForEachRowBand(d, i0, nq, j0, nk, [&](int64_t r0, int64_t r1, int64_t width) {
            TimesRowsT(d, r1 - r0, width, d.dim_v, A(1), dout_blk + r0 * ld_dout, ld_dout, hd.v, hd.ldv, hd.vt, hd.ldvt,
                       hd.vt_step, j0, dp.data() + r0 * d.ls, d.ls);
          });
          // Past each row's visible keys P is 0 and dP finite (computed, or
          // the zeros dS was given there before), so whole rows go in.
          if (tile_dots) TileDots(dropout.on ? pz.data() : p.data(), dp.data(), d.ls, nq, nk, tile_dot.data());
          // dS past a row's visible keys is 0 (its P is): written as such,
          // since dP is not computed there.
          for (int64_t r = 0; r < nq; ++r) {
            const A* prow = p.data() + r * d.ls;
            A* drow = dp.data() + r * d.ls;
            const int64_t len = lens[r];
            const A dot = tile_dots ? tile_dot[r] : row_dot[i0 + r];
            if (dropout.on) {
              const A* zrow = z.data() + r * d.ls;
              for (int64_t c = 0; c < len; ++c) drow[c] = prow[c] * (drow[c] * zrow[c] - dot);
            } else {
              for (int64_t c = 0; c < len; ++c) drow[c] = prow[c] * (drow[c] - dot);
            }
            std::fill(drow + len, drow + nk, A(0));
          }
          const A scale = static_cast<A>(d.scale);
          const T* ds = AsOperand(dp.data(), nq, d.ls, dp_op);
          // Row bands of an empty width still run: beta_q 0 zeroes their rows.
          ForEachRowBand(d, i0, nq, j0, nk, [&](int64_t r0, int64_t r1, int64_t width) {
            TileGemm(d, false, false, r1 - r0, d.dim, width, scale, ds + r0 * d.ls, d.ls, hd.K(j0), hd.ldk, beta_q,
                     aq + (i0 + r0) * lq, lq);
          });
          ForEachKeyBand(d, i0, nq, j0, nk, [&](int64_t c0, int64_t c1, int64_t r0) {
            TileGemm(d, true, false, c1 - c0, d.dim, nq - r0, scale, ds + r0 * d.ls + c0, d.ls, hd.Q(i0 + r0), hd.ldq,
                     beta_kv, ak + (j0 + c0) * lk, lk);
          });
        }
      }
      const A* acc[3] = {gq.data(), gk.data(), gv.data()};
      const int64_t seq[3] = {d.seq_q, d.seq_k, d.seq_k}, width[3] = {d.dim, d.dim, d.dim_v};
      for (int i = 0; i < 3; ++i) {
        if (wide[i]) StoreHead(acc[i], wide[i], b, h, seq[i], d.heads, width[i], wide_buf);
        if (*narrow[i] && !direct[i]) StoreHead(acc[i], *narrow[i], b, h, seq[i], d.heads, width[i], narrow_buf);
      }
    }
  };
  // Its loops at the CPU's vector width (nabla/cpu_vectorized.h).
  cpu::ParallelFor(d.batch * d.heads, 1,
                   [&](int64_t begin, int64_t end) { cpu_isa::Vectorized([&] { run(begin, end); }); });
}

void InferFlashAttn(InferShapeContext& c) {
  const Shape q = c.InputShape("q");
  const Shape k = c.InputShape("k");
  const Shape v = c.InputShape("v");
  const DType dtype = c.InputDType("q");
  EnforceFloatDType(dtype, c.Where(), "q");
  for (const char* slot : {"k", "v", "attn_mask"}) {
    if (!c.HasInput(slot)) continue;
    NABLA_ENFORCE(c.InputDType(slot) == dtype, kInvalidArgument, c.Where(), ": ", slot, " must have q's dtype ",
                  DTypeName(dtype), ", but received ", DTypeName(c.InputDType(slot)));
  }
  NABLA_ENFORCE(q.size() == 4 && k.size() == 4 && v.size() == 4, kInvalidArgument, c.Where(),
                ": q, k and v must be [batch, seq, heads, head_dim], but received ", ShapeToString(q), ", ",
                ShapeToString(k), " and ", ShapeToString(v));
  const bool ok = DimsCompatible(k[0], q[0]) && DimsCompatible(v[0], q[0]) && DimsCompatible(k[2], q[2]) &&
                  DimsCompatible(v[2], q[2]) && DimsCompatible(k[3], q[3]) && DimsCompatible(v[1], k[1]);
  NABLA_ENFORCE(ok, kInvalidArgument, c.Where(),
                ": k must be [batch, seq_k, heads, head_dim] and v [batch, seq_k, heads, head_dim_v] for q ",
                ShapeToString(q), ", but received k ", ShapeToString(k), " and v ", ShapeToString(v));
  if (c.HasInput("fixed_seed_offset")) {
    const Shape so = c.InputShape("fixed_seed_offset");
    NABLA_ENFORCE(c.InputDType("fixed_seed_offset") == DType::kInt64 && so.size() == 1 && DimsCompatible(so[0], 2),
                  kInvalidArgument, c.Where(), ": fixed_seed_offset must be int64 [2] (seed, offset), but received ",
                  DTypeName(c.InputDType("fixed_seed_offset")), " ", ShapeToString(so));
  }
  if (c.HasInput("attn_mask")) {
    int64_t strides[4];
    AttnMaskStrides(c.InputShape("attn_mask"), {q[0], q[2], q[1], k[1]}, strides, c.Where());
  }
  c.SetOutputShape("out", {q[0], q[1], q[2], v[3]});
  c.SetOutputDType("out", dtype);
  c.SetOutputShape("softmax_lse", {q[0], q[2], q[1]});
  // bfloat16 attention keeps its log-sum-exp in float32 (as Paddle's does):
  // rounded to 8 bits it would shift every recomputed probability by ~1 %.
  c.SetOutputDType("softmax_lse", dtype == DType::kBFloat16 ? DType::kFloat32 : dtype);
  if (c.HasOutput("softmax")) {
    c.SetOutputShape("softmax", c.Attr<bool>("return_softmax") ? Shape{q[0], q[2], q[1], k[1]} : Shape{0});
    c.SetOutputDType("softmax", dtype);
  }
  if (c.HasOutput("seed_offset")) {
    c.SetOutputShape("seed_offset", {2});
    c.SetOutputDType("seed_offset", DType::kInt64);
  }
}

class FlashAttnGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    VarNameMap in{{"q", Input("q")},
                  {"k", Input("k")},
                  {"v", Input("v")},
                  {"out", Output("out")},
                  {"softmax_lse", Output("softmax_lse")},
                  {GradVarName("out"), OutputGrad("out")}};
    if (ForwardOp().HasInput("attn_mask")) in["attn_mask"] = Input("attn_mask");
    // Dropout's mask is drawn again from the seed the forward used.
    if (ForwardOp().HasOutput("seed_offset")) in["seed_offset"] = Output("seed_offset");
    if (ForwardOp().HasInput("fixed_seed_offset")) in["fixed_seed_offset"] = Input("fixed_seed_offset");
    const OpDesc& fwd = ForwardOp();
    const float p = fwd.HasAttr("dropout") ? Attr<float>("dropout") : 0.0f;
    NABLA_ENFORCE(p == 0.0f || (fwd.HasAttr("is_test") && Attr<bool>("is_test")) || in.count("seed_offset") ||
                      in.count("fixed_seed_offset"),
                  kInvalidArgument, "op 'flash_attn': dropout ", p,
                  " in training needs the output seed_offset (or the input fixed_seed_offset) for its gradient to "
                  "draw the same mask, but it has neither");
    VarNameMap out{
        {GradVarName("q"), InputGrad("q")}, {GradVarName("k"), InputGrad("k")}, {GradVarName("v"), InputGrad("v")}};
    return OneOp("flash_attn_grad", std::move(in), std::move(out), Attrs());
  }
};

GradCheckSpec AttnCase(std::string name, Shape q, Shape k, Shape v, bool causal) {
  GradCheckSpec spec = CheckCase(std::move(name),
                                 {CheckInput("q", std::move(q), -1.5, 1.5), CheckInput("k", std::move(k), -1.5, 1.5),
                                  CheckInput("v", std::move(v))},
                                 {{"causal", causal}}, {{"out", 1}, {"softmax_lse", 1}});
  spec.no_grad_outputs = {"softmax_lse"};
  return spec;
}

}  // namespace

NABLA_REGISTER_OPS(flash_attn) {
  GradCheckSpec cross = AttnCase("cross_head_dim_v", {2, 3, 2, 4}, {2, 5, 2, 4}, {2, 5, 2, 3}, false);
  GradCheckSpec causal = AttnCase("causal", {1, 4, 2, 3}, {1, 4, 2, 3}, {1, 4, 2, 3}, true);
  GradCheckSpec masked = AttnCase("mask_broadcast_heads", {2, 3, 2, 4}, {2, 4, 2, 4}, {2, 4, 2, 4}, false);
  masked.inputs.push_back(NoCheck(CheckInput("attn_mask", {2, 1, 3, 4}, -2.0, 0.0)));
  // Longer than one 128-row tile, so the online softmax's rescaling, the
  // diagonal tiles and the skipped tiles are all checked.
  GradCheckSpec tiled = AttnCase("causal_tiles_cross_len", {1, 140, 1, 2}, {1, 150, 1, 2}, {1, 150, 1, 2}, true);
  tiled.inputs.push_back(NoCheck(CheckInput("attn_mask", {140, 150}, -1.0, 0.0)));
  GradCheckSpec tiled_full = AttnCase("tiles_not_causal", {1, 130, 1, 2}, {1, 135, 1, 2}, {1, 135, 1, 2}, false);
  // More queries than keys, causal: the first 280 see no key, so two whole
  // query tiles get no product and their gradients must still be zeros.
  GradCheckSpec blind = AttnCase("causal_queries_seeing_no_key", {1, 300, 1, 2}, {1, 20, 1, 2}, {1, 20, 1, 2}, true);
  // Dropout with a fixed seed: the mask is drawn again in backward, so the
  // differences and the gradient see the same one. Across tiles, causal, a
  // mask; and once with the seed the run gives (seed_offset carries it).
  GradCheckSpec drop = AttnCase("dropout_causal_tiles_mask", {1, 140, 2, 3}, {1, 150, 2, 3}, {1, 150, 2, 3}, true);
  drop.inputs.push_back(NoCheck(CheckInput("attn_mask", {1, 2, 140, 150}, -1.0, 0.0)));
  GradCheckInput fixed = NoCheck(CheckInput("fixed_seed_offset", {2}));
  fixed.dtype = DType::kInt64;
  fixed.values = {1234567, 3};
  drop.inputs.push_back(fixed);
  drop.attrs["dropout"] = 0.3f;
  drop.outputs.emplace_back("seed_offset", 1);
  drop.no_grad_outputs.push_back("seed_offset");
  GradCheckSpec drop_run = AttnCase("dropout_run_seed", {2, 5, 2, 4}, {2, 6, 2, 4}, {2, 6, 2, 3}, false);
  drop_run.attrs["dropout"] = 0.5f;
  drop_run.outputs.emplace_back("seed_offset", 1);
  drop_run.no_grad_outputs.push_back("seed_offset");
  registrar
      .Op("flash_attn", __FILE__, __LINE__)
      // GEMM-bound: bfloat16 under mixed precision; softmax_lse stays
      // float32 there (InferFlashAttn), which the pass leaves uncast.
      .Precision(OpPrecision::kLow)
      .Doc(
          "Scaled dot-product attention, out = softmax(q k^T / sqrt(head_dim) + attn_mask) v per batch and head, "
          "computed tile by tile with an online softmax (FlashAttention-2): memory linear in the sequence length. "
          "causal hides key j from query i when j > i + seq_k - seq_q.")
      .Input("q", "(Tensor) queries, [batch, seq_q, heads, head_dim], float32, float64 or bfloat16")
      .Input("k", "(Tensor) keys, [batch, seq_k, heads, head_dim], dtype of q")
      .Input("v", "(Tensor) values, [batch, seq_k, heads, head_dim_v], dtype of q")
      .Input("fixed_seed_offset",
             "(Tensor, optional) int64 [2]: dropout's seed and offset, fixing its mask; without it the seed is "
             "drawn per run from the run's seed",
             kDispensable)
      .Input("attn_mask",
             "(Tensor, optional) added to the scaled scores, broadcast to [batch, heads, seq_q, seq_k] "
             "(-inf or a large negative value hides a key); dtype of q; gets no gradient",
             kDispensable)
      .Output("out", "(Tensor) the attention output, [batch, seq_q, heads, head_dim_v]")
      .Output("softmax",
              "(Tensor, optional) the probabilities [batch, heads, seq_q, seq_k] when return_softmax, as out "
              "used them: after dropout, kept ones scaled by 1 / (1 - dropout)",
              kDispensable)
      .Output("softmax_lse",
              "(Tensor) log-sum-exp of each row's scaled scores, [batch, heads, seq_q]; float32 for bfloat16 q")
      .Output("seed_offset",
              "(Tensor, optional) int64 [2], the seed and offset dropout drew its mask from ([0, 0] without "
              "dropout); the gradient reads it to draw the same mask again",
              kDispensable)
      .Attr<float>("dropout", 0.0f,
                   "(float, default 0.0) probability of dropping an attention probability in training (is_test "
                   "false); kept ones are scaled by 1 / (1 - dropout). The mask is drawn from a counter-based "
                   "generator (Philox), never stored",
                   [](const float& p) {
                     NABLA_ENFORCE(p >= 0.0f && p < 1.0f, kInvalidArgument,
                                   "attribute dropout must be in [0, 1), but received ", p);
                   })
      .Attr<bool>("causal", false, "(bool, default false) each query sees only the keys up to its own position")
      .Attr<bool>("return_softmax", false,
                  "(bool, default false) also write the [batch, heads, seq_q, seq_k] probabilities to softmax")
      .Attr<bool>("is_test", false, "(bool, default false) inference: dropout is not applied")
      .Attr<std::string>("rng_name", "",
                         "(string, default \"\") Paddle's name of the dropout generator; nabla draws from the "
                         "run's seed (or fixed_seed_offset) whatever it says")
      .InferShape(InferFlashAttn)
      .GradMaker<FlashAttnGradMaker>()
      .GradCheck(cross)
      .GradCheck(causal)
      .GradCheck(masked)
      .GradCheck(tiled)
      .GradCheck(tiled_full)
      .GradCheck(blind)
      .GradCheck(drop)
      .GradCheck(drop_run)
      .RewritesBeforeBackward({"attention_from_matmul_softmax", &FuseAttention});
  OpBuilder& grad = registrar.DefaultGradOp("flash_attn", __FILE__, __LINE__);
  grad.Doc("Gradient of flash_attn: q, k and v gradients from probabilities recomputed tile by tile from softmax_lse.")
      .Attr<bool>(kForceFp32OutputAttr, false, kForceFp32GradsDoc)
      .InferShape([](InferShapeContext& c) {
        InferSameAs(c, "q", GradVarName("q"));
        InferSameAs(c, "k", GradVarName("k"));
        InferSameAs(c, "v", GradVarName("v"));
        ForceFp32Outputs(c, "q");
      })
      .KernelDType(DTypeOfInput(GradVarName("out")));
  RegisterFloatKernels(registrar, "flash_attn", FlashAttnKernel<float>, FlashAttnKernel<double>, __FILE__, __LINE__);
  RegisterFloatKernels(registrar, "flash_attn_grad", FlashAttnGradKernel<float>, FlashAttnGradKernel<double>, __FILE__,
                       __LINE__);
  registrar.Kernel("flash_attn", DeviceType::kCPU, DType::kBFloat16, FlashAttnKernel<bfloat16>, __FILE__, __LINE__);
  registrar.Kernel("flash_attn_grad", DeviceType::kCPU, DType::kBFloat16, FlashAttnGradKernel<bfloat16>, __FILE__,
                   __LINE__);
}

}  // namespace nabla::nn
