// Internal: f16 / bf16 <-> f32 conversion for kernels that store 16-bit floats and compute in
// f32. Round to nearest even, NaN stays NaN (quiet), overflow to inf: the convert op's rules.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "rlx/ir/dtype.h"

namespace rlx::cpu {

inline float to_f32(float x) { return x; }
inline float to_f32(bf16 h) {
  uint32_t bits = static_cast<uint32_t>(std::bit_cast<uint16_t>(h)) << 16;
  return std::bit_cast<float>(bits);
}
inline float to_f32(f16 h) { return f16_to_float(h); }

template <class T>
T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
  return x;
}
template <>
inline bf16 from_f32<bf16>(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign, force a quiet payload bit
    return std::bit_cast<bf16>(static_cast<uint16_t>((bits >> 16) | 0x40u));
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even on the dropped 16 bits
  return std::bit_cast<bf16>(static_cast<uint16_t>(bits >> 16));
}
template <>
inline f16 from_f32<f16>(float x) {
  return f16_from_float(x);
}

/// dst[i] = float(src[i]) for i < n.
template <class T>
void load_f32(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}
/// dst[i] = T(src[i]) (rounded) for i < n.
template <class T>
void store_f32(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<T>(src[i]);
}

}  // namespace rlx::cpu
