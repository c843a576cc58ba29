// OpenCL C of flash_attn and its gradient (flash_attn_opencl.cc): one work
// item per query row (forward, dq, the probabilities) or key row (dk, dv),
// each keeping FlashAttention's running max and sum, so no [seq_q, seq_k]
// buffer exists. q, k, v and out are [batch, seq, heads, dim].
//   D: batch, seq_q, seq_k, heads, dim, dim_v, offset (seq_k - seq_q), causal
//   M: attn_mask's strides over [batch, heads, seq_q, seq_k], then 1 if there is a mask
//   R: dropout: 1 if on, seed, offset, keep threshold (a word w keeps iff w >> 8 >= it); Z its 1 / (1 - p)
// Dropout draws the words of AttnDropout (flash_attn.h) with the rounds of
// opkit's Philox4x32, so the CPU and this device drop the same probabilities.

#define QROW(D, b, i, h) ((((b) * (D).s1 + (i)) * (D).s3 + (h)) * (D).s4)
#define KROW(D, b, j, h) ((((b) * (D).s2 + (j)) * (D).s3 + (h)) * (D).s4)
#define VROW(D, b, j, h) ((((b) * (D).s2 + (j)) * (D).s3 + (h)) * (D).s5)
#define OROW(D, b, i, h) ((((b) * (D).s1 + (i)) * (D).s3 + (h)) * (D).s5)

uint4 philox4x32(ulong key, uint4 c) {
  uint k0 = (uint)key, k1 = (uint)(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint hi0 = mul_hi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    uint hi1 = mul_hi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = (uint4)(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The dropout factor of probability (bh, i, j): 0 or Z (1 without dropout).
T drop(long8 R, T Z, long bh, long i, long j) {
  if (!R.s0) return (T)1;
  uint4 w = philox4x32((ulong)R.s1, (uint4)((uint)(j >> 2), (uint)i, (uint)bh, (uint)R.s2));
  long lane = j & 3;
  uint x = lane == 0 ? w.x : lane == 1 ? w.y : lane == 2 ? w.z : w.w;
  return (long)(x >> 8) >= R.s3 ? Z : (T)0;
}

// Keys [0, end) are visible to query i.
long key_end(long8 D, long i) { return D.s7 ? clamp(i + D.s6 + 1, (long)0, D.s2) : D.s2; }

T score(__global const T* q, __global const T* k, __global const T* mask, long8 D, long8 M, T scale, long b,
        long h, long i, long j) {
  __global const T* qr = q + QROW(D, b, i, h);
  __global const T* kr = k + KROW(D, b, j, h);
  T s = (T)0;
  for (long c = 0; c < D.s4; ++c) s += qr[c] * kr[c];
  s *= scale;
  if (M.s4) s += mask[b * M.s0 + h * M.s1 + i * M.s2 + j * M.s3];
  return s;
}

// Row r = (b * heads + h) * seq_q + i: the layout of softmax_lse.
__kernel void flash_attn_fwd(__global const T* q, __global const T* k, __global const T* v,
                             __global const T* mask, __global T* out, __global T* lse, long rows, long8 D, long8 M,
                             T scale, long8 R, T Z) {
  long r = GID;
  if (r >= rows) return;
  long i = r % D.s1, h = (r / D.s1) % D.s3, b = r / (D.s1 * D.s3);
  __global T* o = out + OROW(D, b, i, h);
  for (long c = 0; c < D.s5; ++c) o[c] = (T)0;
  T m = -INFINITY, l = (T)0;
  long end = key_end(D, i);
  for (long j = 0; j < end; ++j) {
    T s = score(q, k, mask, D, M, scale, b, h, i, j);
    if (s == -INFINITY) continue;
    __global const T* vr = v + VROW(D, b, j, h);
    // l sums the probabilities before dropout, o those after.
    T z = drop(R, Z, r / D.s1, i, j);
    if (s > m) {
      T alpha = m == -INFINITY ? (T)0 : exp(m - s);
      for (long c = 0; c < D.s5; ++c) o[c] = o[c] * alpha + z * vr[c];
      l = l * alpha + (T)1;
      m = s;
    } else {
      T p = exp(s - m);
      for (long c = 0; c < D.s5; ++c) o[c] += p * z * vr[c];
      l += p;
    }
  }
  if (l == (T)0) {
    lse[r] = -INFINITY;
    return;
  }
  T inv = (T)1 / l;
  for (long c = 0; c < D.s5; ++c) o[c] *= inv;
  lse[r] = m + log(l);
}

// What row r's probabilities are made of: P = exp(s - shift[r]) * inv[r].
// shift = lse and inv = 1, except where |lse| >= large: there lse = m +
// log(l) has lost log(l) (float's -1e9 + log(257) is -1e9, when a mask
// shifts a whole row), and the row's max m and sum l are found again:
// shift = m, inv = 1 / l. Rows with lse -inf see no key.
__kernel void flash_attn_row_shift(__global const T* q, __global const T* k, __global const T* mask,
                                   __global const T* lse, __global T* shift, __global T* inv, long rows, long8 D,
                                   long8 M, T scale, T large) {
  long r = GID;
  if (r >= rows) return;
  T x = lse[r];
  shift[r] = x;
  inv[r] = (T)1;
  if (!(fabs(x) >= large) || x == -INFINITY || x == INFINITY) return;
  long i = r % D.s1, h = (r / D.s1) % D.s3, b = r / (D.s1 * D.s3);
  long end = key_end(D, i);
  T m = -INFINITY, l = (T)0;
  for (long j = 0; j < end; ++j) {
    T s = score(q, k, mask, D, M, scale, b, h, i, j);
    if (s == -INFINITY) continue;
    if (s > m) {
      l = (m == -INFINITY ? (T)0 : l * exp(m - s)) + (T)1;
      m = s;
    } else {
      l += exp(s - m);
    }
  }
  if (l == (T)0) return;
  shift[r] = m;
  inv[r] = (T)1 / l;
}

// The probabilities [batch, heads, seq_q, seq_k] (return_softmax).
__kernel void flash_attn_probs(__global const T* q, __global const T* k, __global const T* mask,
                               __global const T* lse, __global const T* shift, __global const T* inv,
                               __global T* probs, long rows, long8 D, long8 M, T scale, long8 R, T Z) {
  long r = GID;
  if (r >= rows) return;
  long i = r % D.s1, h = (r / D.s1) % D.s3, b = r / (D.s1 * D.s3);
  long end = lse[r] == -INFINITY ? 0 : key_end(D, i);
  __global T* p = probs + r * D.s2;
  for (long j = 0; j < D.s2; ++j)
    p[j] = j < end ? exp(score(q, k, mask, D, M, scale, b, h, i, j) - shift[r]) * inv[r] * drop(R, Z, r / D.s1, i, j)
                   : (T)0;
}

// Per query row (after flash_attn_row_shift): dot = D (kept for the key
// pass) and dq = scale * sum_j P_ij (dP_ij Z_ij - dot) k_j with dP_ij =
// dO_i . v_j. D is rowsum(dO * O), or with tile_dots (few keys, flash_attn.h's
// kFlashAttnShortKeys) rowsum(P * Z * dP) as the CPU takes it: then one key
// gives dS exactly 0, as the true gradient is.
__kernel void flash_attn_bwd_dq(__global const T* q, __global const T* k, __global const T* v,
                                __global const T* mask, __global const T* out, __global const T* lse,
                                __global const T* shift, __global const T* inv, __global const T* dout, __global T* dq, __global T* dot, long rows,
                                long tile_dots, long8 D, long8 M, T scale, long8 R, T Z) {
  long r = GID;
  if (r >= rows) return;
  long i = r % D.s1, h = (r / D.s1) % D.s3, b = r / (D.s1 * D.s3);
  __global const T* o = out + OROW(D, b, i, h);
  __global const T* g = dout + OROW(D, b, i, h);
  long end = lse[r] == -INFINITY ? 0 : key_end(D, i);
  T d = (T)0;
  if (tile_dots) {
    for (long j = 0; j < end; ++j) {
      T p = exp(score(q, k, mask, D, M, scale, b, h, i, j) - shift[r]) * inv[r];
      __global const T* vr = v + VROW(D, b, j, h);
      T dp = (T)0;
      for (long c = 0; c < D.s5; ++c) dp += g[c] * vr[c];
      T dpz = dp * drop(R, Z, r / D.s1, i, j);
      d += p * dpz;
    }
  } else {
    for (long c = 0; c < D.s5; ++c) d += o[c] * g[c];
  }
  dot[r] = d;
  __global T* dqr = dq + QROW(D, b, i, h);
  for (long c = 0; c < D.s4; ++c) dqr[c] = (T)0;
  for (long j = 0; j < end; ++j) {
    T p = exp(score(q, k, mask, D, M, scale, b, h, i, j) - shift[r]) * inv[r];
    __global const T* vr = v + VROW(D, b, j, h);
    T dp = (T)0;
    for (long c = 0; c < D.s5; ++c) dp += g[c] * vr[c];
    // dP * Z rounded on its own, as in D: contracted into fma(dp, z, -d)
    // it would leave one key's dS at rounding noise rather than 0.
    T dpz = dp * drop(R, Z, r / D.s1, i, j);
    T ds = p * (dpz - d) * scale;
    __global const T* kr = k + KROW(D, b, j, h);
    for (long c = 0; c < D.s4; ++c) dqr[c] += ds * kr[c];
  }
}

// Per key row (b, h, j): dv = sum_i P_ij dO_i, dk = scale * sum_i dS_ij q_i,
// over the queries that see key j; runs after flash_attn_bwd_dq wrote dot.
__kernel void flash_attn_bwd_dkv(__global const T* q, __global const T* k, __global const T* v,
                                 __global const T* mask, __global const T* lse, __global const T* shift,
                                 __global const T* inv, __global const T* dout,
                                 __global const T* dot, __global T* dk, __global T* dv, long rows, long8 D, long8 M,
                                 T scale, long8 R, T Z) {
  long r = GID;
  if (r >= rows) return;
  long j = r % D.s2, h = (r / D.s2) % D.s3, b = r / (D.s2 * D.s3);
  __global T* dkr = dk + KROW(D, b, j, h);
  __global T* dvr = dv + VROW(D, b, j, h);
  __global const T* vr = v + VROW(D, b, j, h);
  for (long c = 0; c < D.s4; ++c) dkr[c] = (T)0;
  for (long c = 0; c < D.s5; ++c) dvr[c] = (T)0;
  // Causal: query i sees key j from i = j - offset on.
  long first = D.s7 ? max(j - D.s6, (long)0) : 0;
  for (long i = first; i < D.s1; ++i) {
    long row = (b * D.s3 + h) * D.s1 + i;
    if (lse[row] == -INFINITY) continue;
    T p = exp(score(q, k, mask, D, M, scale, b, h, i, j) - shift[row]) * inv[row];
    T z = drop(R, Z, b * D.s3 + h, i, j);
    __global const T* g = dout + OROW(D, b, i, h);
    T dp = (T)0;
    for (long c = 0; c < D.s5; ++c) {
      dvr[c] += p * z * g[c];
      dp += g[c] * vr[c];
    }
    T dpz = dp * z;  // rounded on its own, as in flash_attn_bwd_dq
    T ds = p * (dpz - dot[row]) * scale;
    __global const T* qr = q + QROW(D, b, i, h);
    for (long c = 0; c < D.s4; ++c) dkr[c] += ds * qr[c];
  }
}
