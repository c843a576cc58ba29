#pragma once
// Vector math beyond cpu.h's activations, for kernels that build their own
// loops (flash_attn's online softmax).
#include <cstdint>

#include "nabla/export.h"

namespace nabla::cpu {

// y = exp(x - shift) elementwise, float32, vectorized (relative error about
// 1e-7); exactly 0 where x - shift < -87 (and for x = -inf), so masked
// scores cost no more than others. y may be x.
NABLA_API void ExpShifted(const float* x, float shift, float* y, int64_t n);

// Row kernels for softmax, softmax_with_cross_entropy and layer_norm
// (float32, vectorized; sums run in 16 float lanes added in a fixed order,
// so results never depend on the thread count). The scalar double loops
// they replace, with libm's exp, were 15 % of the GPT block step (perf).
//
// The largest element of x[0, n), n >= 1.
NABLA_API float RowMax(const float* x, int64_t n);
// y = exp(x - shift) as ExpShifted, returning sum(y).
NABLA_API float ExpShiftedSum(const float* x, float shift, float* y, int64_t n);
// y *= s.
NABLA_API void ScaleRow(float* y, float s, int64_t n);
// sum(a * b).
NABLA_API float DotRow(const float* a, const float* b, int64_t n);
// softmax's gradient along a row: dx = y * (dy - sum(y * dy)).
NABLA_API void SoftmaxGradRow(const float* y, const float* dy, float* dx, int64_t n);
// layer_norm of one row of n: y = (x - mean) * rstd * scale + bias (scale,
// bias may be null); two passes, so a large mean does not cancel the spread.
// Writes the row's mean and biased variance.
NABLA_API void LayerNormRow(const float* x, int64_t n, const float* scale, const float* bias, float eps, float* y,
                            float* mean, float* var);
// layer_norm's gradient for one row, from its saved mean and rstd:
// xhat = (x - mean) * rstd, g = dy * scale (or dy), dx = rstd * (g -
// mean(g) - xhat * mean(g * xhat)) where dx is not null; adds dy * xhat to
// dscale and dy to dbias where they are not null.
NABLA_API void LayerNormGradRow(const float* x, const float* dy, int64_t n, float mean, float rstd, const float* scale,
                                float* dx, float* dscale, float* dbias);

// The same kernels over many rows a call, each row's result bit for bit
// the one-row kernel's, for kernels over short rows (C ABI version 9 hands
// them to plugins, which paid a call through the table per row). The
// layer_norm rows overlap four at a time: a short row's work is chains of
// dependent adds and reductions, and a row at a time waited on each in
// turn (vmath_bench, 1024 rows of 128 in cache on a Zen 4 core, medians:
// forward 54 -> 42 us, gradient 49 -> 39 us; out of cache the same).
//
// LayerNormRow for `rows` rows of n, x, y a row (n) apart; mean and var
// take one value per row.
NABLA_API void LayerNormRows(const float* x, int64_t rows, int64_t n, const float* scale, const float* bias, float eps,
                             float* y, float* mean, float* var);
// LayerNormGradRow for `rows` rows of n (x, dy, dx a row apart; mean and
// rstd one per row); dscale and dbias take the rows in order. Where acc
// (rows a row apart) is not null, dx = acc + dx, each element added once
// dx's is final (a residual's gradient added in the same pass); acc may be
// dx.
NABLA_API void LayerNormGradRows(const float* x, const float* dy, int64_t rows, int64_t n, const float* mean,
                                 const float* rstd, const float* scale, const float* acc, float* dx, float* dscale,
                                 float* dbias);
// out[r] = RowMax of row r's first lens[r] elements (rows ld apart), -inf
// where lens[r] is 0.
NABLA_API void RowMaxRows(const float* x, int64_t ld, int64_t rows, const int64_t* lens, float* out);
// Row r of y (rows ldy apart) = exp(x - shifts[r]) over row r of x's first
// lens[r] elements (ExpShifted's values), then zeros to `width`, with
// 0 <= lens[r] <= width; sums[r] = ExpShiftedSum's sum of them where sums
// is not null (0 for an empty row). y may be x.
NABLA_API void ExpShiftedRows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const int64_t* lens,
                              int64_t width, const float* shifts, float* sums);
// dots[r] = DotRow of row r of a and of b, each n long (rows lda and ldb
// apart).
NABLA_API void DotRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t n, float* dots);

}  // namespace nabla::cpu
