#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011), the counter-based generator of cuRAND and PyTorch's CUDA
// dropout: four 32-bit words from a 64-bit key and a 128-bit counter, with no
// state. A kernel that draws element e from counter e can draw it again in
// any order, on any device, which is what lets a backward pass recompute a
// dropout mask from its seed instead of storing it. Device kernels (OpenCL
// C) spell the same rounds out; the constants are the paper's.
#include <array>
#include <cstdint>

namespace nabla::opkit {

inline std::array<uint32_t, 4> Philox4x32(uint64_t key, std::array<uint32_t, 4> ctr) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0, static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// A word as a float uniform in [0, 1): its top 24 bits, exact in float.
inline float PhiloxUniform(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

}  // namespace nabla::opkit
