#pragma once
// float32 <-> bfloat16 on a bfloat16's bits, in one place for the core
// (nabla/types.h: FloatToBf16, Bf16ToFloat) and the C ABI SDK
// (nabla/sdk/plugin.h, same names), which cannot include each other: each
// wraps these around its own bfloat16 struct, so both round alike.
#include <cstdint>
#include <cstring>

namespace nabla::bf16_bits {

inline float ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round to nearest, ties to even (what oneDNN and PyTorch do); NaN stays NaN.
inline uint16_t FromFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace nabla::bf16_bits
