// Internal, per-target Highway code: f16 / bf16 rows widened to f32 and f32 rows narrowed back
// (round to nearest even, overflow to inf, NaN stays NaN and becomes quiet: half.h's scalar
// rules, bit for bit). Included by the Highway files of kernels/ (vec_math.cc, nn.cc,
// attention.cc) after <hwy/highway.h>, so once per target of their foreach_target.h pass; they
// name the functions from their own per-target namespace with using-declarations.

// Per-target include guard, toggled by foreach_target.h as Highway's -inl.h headers do.
#if defined(RLX_CPU_KERNELS_HALF_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RLX_CPU_KERNELS_HALF_INL_H_
#undef RLX_CPU_KERNELS_HALF_INL_H_
#else
#define RLX_CPU_KERNELS_HALF_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "half.h"

HWY_BEFORE_NAMESPACE();
namespace rlx::cpu::half_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Highway 1.0.3 converts f16 in hardware (F16C, rounding to nearest even) from AVX2 up; its
// emulation on older targets truncates and maps inf / NaN to finite values, so those targets
// convert with half.h's scalar forms.
inline constexpr bool kF16Hardware = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2;

// The u32 lanes of f32 `v` whose top 16 bits are v as bf16: rounded to nearest even on the
// dropped 16 bits (overflow carries into inf), a NaN with its quiet bit set (from_f32<bf16>).
// Highway 1.0.3's own bf16 DemoteTo truncates.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> RoundedBF16Bits(DF, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du32;
  const auto u = hn::BitCast(du32, v);
  const auto odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du32, 1));
  const auto rounded = hn::Add(u, hn::Add(hn::Set(du32, 0x7fff), odd));
  const auto quiet = hn::Or(u, hn::Set(du32, 0x400000));
  return hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet, rounded);
}

// dst[i] = float(src[i]) for i < n; exact.
HWY_INLINE void Widen(const bf16* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const auto* bits = reinterpret_cast<const uint16_t*>(src);
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, bits + i)))),
               df, dst + i);
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

HWY_INLINE void Widen(const f16* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  size_t i = 0;
  if constexpr (kF16Hardware) {
    const hn::ScalableTag<float> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const auto* h = reinterpret_cast<const hwy::float16_t*>(src);
    const size_t lanes = hn::Lanes(df);
    for (; i + lanes <= n; i += lanes)
      hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + i)), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

// dst[i] = src[i] rounded to nearest even, overflow to inf, NaN kept (quiet).
HWY_INLINE void Narrow(const float* HWY_RESTRICT src, bf16* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di32;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  auto* bits = reinterpret_cast<uint16_t*>(dst);
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto top = hn::ShiftRight<16>(RoundedBF16Bits(df, hn::LoadU(df, src + i)));
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, top)), du16, bits + i);
  }
  for (; i < n; ++i) dst[i] = from_f32<bf16>(src[i]);
}

HWY_INLINE void Narrow(const float* HWY_RESTRICT src, f16* HWY_RESTRICT dst, size_t n) {
  size_t i = 0;
  if constexpr (kF16Hardware) {  // vcvtps2ph rounds to nearest even
    const hn::ScalableTag<float> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    auto* h = reinterpret_cast<hwy::float16_t*>(dst);
    const size_t lanes = hn::Lanes(df);
    for (; i + lanes <= n; i += lanes)
      hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, src + i)), dh, h + i);
  }
  for (; i < n; ++i) dst[i] = from_f32<f16>(src[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace rlx::cpu::half_simd
HWY_AFTER_NAMESPACE();

#endif  // RLX_CPU_KERNELS_HALF_INL_H_
