// The Threefry-2x32 block cipher (20 rounds) of Salmon, Moraes, Dror and Shaw, "Parallel random
// numbers: as easy as 1, 2, 3" (SC 2011; Random123's threefry2x32_R(20)), exactly as jax.random
// computes it (jax/_src/prng.py, threefry2x32_p): the scalar definition the reference evaluator
// and the CPU kernel of the threefry2x32 op share, and the constants the StableHLO lowering
// emits.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace rlx {

/// Left-rotation amounts of the two alternating groups of four rounds.
inline constexpr std::array<std::array<uint32_t, 4>, 2> kThreefryRotations{
    {{13, 15, 26, 6}, {17, 29, 16, 24}}};
/// Skein's key-schedule parity constant: the third key word is k0 ^ k1 ^ kThreefryParity.
inline constexpr uint32_t kThreefryParity = 0x1BD11BDA;

/// Encrypts the counter pair (x0, x1) under the key (k0, k1); returns (y0, y1). Five groups of
/// four rounds (x0 += x1; x1 = rotl(x1, r) ^ x0) with a key injection before, between and
/// after them (injection i adds ks[i % 3] and ks[(i + 1) % 3] + i).
constexpr std::pair<uint32_t, uint32_t> threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0,
                                                     uint32_t x1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ kThreefryParity};
  x0 += ks[0];
  x1 += ks[1];
  for (uint32_t i = 1; i <= 5; ++i) {
    for (uint32_t r : kThreefryRotations[(i - 1) % 2]) {
      x0 += x1;
      x1 = (x1 << r) | (x1 >> (32 - r));
      x1 ^= x0;
    }
    x0 += ks[i % 3];
    x1 += ks[(i + 1) % 3] + i;
  }
  return {x0, x1};
}

// Random123's known-answer tests for threefry2x32_20 (kat_vectors), which jax's tests use too.
static_assert(threefry2x32(0, 0, 0, 0) == std::pair<uint32_t, uint32_t>{0x6b200159u, 0x99ba4efeu});
static_assert(threefry2x32(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu) ==
              std::pair<uint32_t, uint32_t>{0x1cb996fcu, 0xbb002be7u});
static_assert(threefry2x32(0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u) ==
              std::pair<uint32_t, uint32_t>{0xc4923a9cu, 0x483df7a0u});

/// The two key words of a 64-bit seed, as jax.random.PRNGKey(seed) (threefry_seed):
/// {seed >> 32, seed & 0xffffffff}.
constexpr std::array<uint32_t, 2> threefry_seed(uint64_t seed) {
  return {static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed)};
}

}  // namespace rlx
