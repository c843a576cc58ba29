#pragma once
// What dropout's CPU and OpenCL kernels share: where the mask's seed comes
// from and how the mask is drawn, so that both devices drop the same
// elements for the same seed.
#include <cstdint>
#include <string>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

inline bool DropoutUpscales(const ExecutionContext& ctx) {
  return ctx.Attr<std::string>("dropout_implementation") == "upscale_in_train";
}

// Input Seed pins the mask (Paddle: before fix_seed and seed); fix_seed pins
// it to `seed`; otherwise ExecutionContext::Seed() varies it per step
// (RunOptions::random_index), reproducibly for a given run seed.
inline uint64_t DropoutSeed(const ExecutionContext& ctx) {
  return ctx.HasInput("Seed")         ? static_cast<uint64_t>(*IntAttrOrTensor(ctx, "Seed", "seed"))
         : ctx.Attr<bool>("fix_seed") ? static_cast<uint64_t>(ctx.Attr<int>("seed"))
                                      : ctx.Seed();
}

// Writes the training mask of n elements: 1 kept, 0 dropped, each element
// one draw, in order.
template <typename T>
void DrawDropoutMask(const ExecutionContext& ctx, int64_t n, double p, T* mask) {
  Rng rng(DropoutSeed(ctx));
  for (int64_t i = 0; i < n; ++i) mask[i] = rng.Uniform01() >= p ? T(1) : T(0);
}

}  // namespace nabla::nn
