// Internal: f16 / bf16 <-> f32 conversion for kernels that store 16-bit floats and compute in
// f32. Round to nearest even, NaN stays NaN (quiet), overflow to inf: the convert op's rules.
// The scalar forms are inline bit manipulation; the array forms for f16 / bf16 are SIMD code
// (vec_math.cc, Highway with run-time dispatch).
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
/// Exact; a NaN keeps its payload (shifted into the f32 significand) and becomes quiet, as the
/// F16C conversion does.
inline float to_f32(f16 h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0)  // zero or subnormal: mant * 2^-24, exact in f32
    return std::bit_cast<float>(std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f) |
                                sign);
  if (exp == 31)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

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
/// Correctly rounded (nearest even), so equal to f16_from_float; NaN -> quiet NaN of its sign.
template <>
inline f16 from_f32<f16>(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};
  if (mag >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: inf
  if (mag < 0x38800000u) {
    // Below 2^-14 the f16 grid is 2^-24, which is the f32 grid of [0.5, 1): adding 0.5 rounds
    // |x| to a multiple of 2^-24 (nearest even, in hardware) and leaves it in the low bits.
    float shifted = std::bit_cast<float>(mag) + 0.5f;
    return f16{static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u))};
  }
  mag += 0xfffu + ((mag >> 13) & 1u);  // round to nearest even on the dropped 13 bits
  return f16{static_cast<uint16_t>(sign | ((mag - 0x38000000u) >> 13))};
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

// SIMD overloads of the array forms (exact / rounded as the scalar forms, bit for bit); overload
// resolution prefers them over the templates for f16 and bf16 pointers.
void load_f32(const f16* src, float* dst, int64_t n);
void load_f32(const bf16* src, float* dst, int64_t n);
void store_f32(const float* src, f16* dst, int64_t n);
void store_f32(const float* src, bf16* dst, int64_t n);

}  // namespace rlx::cpu
