#pragma once
// The one place nabla talks to oneDNN (Debian's libdnnl, built on OpenMP):
// float32 (and bfloat16) conv2d and float32 pool2d, forward and backward, on NCHW buffers the
// kernels own. Each call returns false when oneDNN cannot serve it (the
// plugin was built without oneDNN, or the shape is one it rejects); the
// caller then runs its im2col/loop reference. Private to this plugin: no
// oneDNN type appears here, so no other file includes dnnl.hpp.
//
// Threads: float32 conv2d cuts the batch into a fixed number of blocks and
// runs one-thread primitives on the executor's arena (cpu::ParallelFor), so
// its bits do not depend on --threads (dnnl_glue.cc says how). Every other
// call runs oneDNN's OpenMP team with at most as many
// threads as the calling executor's task arena allows (--threads), minus
// those other oneDNN calls of the same process hold at that moment, and at
// most OMP_THREAD_LIMIT (cpu::DnnlThreadBudget). The team's threads are not
// the arena's: an arena worker that has just finished a parallel loop
// spins for a while before it sleeps, beside the team (perf: about 9 % of
// a 2-thread CNN backward's samples). float32 conv2d's batch split removes
// that for the convolutions; bfloat16 conv2d and pool2d still have it.
//
// Primitives are cached by shape and attributes: a training step creates
// none after its first run.
#include "conv_util.h"

namespace nabla::nn {

// y = conv(x, w): x [n, c, h, w], w [m, c / groups, kh, kw], y [n, m, oh, ow].
bool DnnlConvForward(const ConvGeom& g, const float* x, const float* w, float* y);
// dx and/or dw (either may be null) from dy.
bool DnnlConvBackward(const ConvGeom& g, const float* x, const float* w, const float* dy, float* dx, float* dw);
// The same in bfloat16 (mixed precision): float32 accumulation inside
// oneDNN, every result (dw too) rounded to bfloat16, or gradients with
// float outputs (conv2d_grad's force_fp32_output) written as they are.
bool DnnlConvForward(const ConvGeom& g, const bfloat16* x, const bfloat16* w, bfloat16* y);
bool DnnlConvBackward(const ConvGeom& g, const bfloat16* x, const bfloat16* w, const bfloat16* dy, bfloat16* dx,
                      bfloat16* dw);
bool DnnlConvBackward(const ConvGeom& g, const bfloat16* x, const bfloat16* w, const bfloat16* dy, float* dx,
                      float* dw);

// y = pool(x); the backward pass writes all of dx.
bool DnnlPoolForward(const PoolGeom& g, const float* x, float* y);
bool DnnlPoolBackward(const PoolGeom& g, const float* x, const float* dy, float* dx);

}  // namespace nabla::nn
