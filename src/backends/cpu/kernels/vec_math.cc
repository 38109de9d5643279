// Vectorized f32 math for the CPU kernels (vec_math.h) and the SIMD f16 / bf16 array
// conversions of half.h (half-inl.h's). Highway SIMD code, compiled for every x86 target in
// HWY_TARGETS (this file is re-included once per target by foreach_target.h) and picked at run
// time.
//
// Accuracy: every bound below is the max error against the exact function (double-precision
// libm as the reference), measured over dense f32 sweeps and asserted by
// tests/backends/cpu/vec_math_test.cc. Special values are fixed up explicitly where Highway's
// contrib math leaves them undefined, to match the reference evaluator's double formulas.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vec_math.cc"
// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
#include "half-inl.h"
// clang-format on

#ifndef RLX_CPU_KERNELS_VEC_MATH_SHARED
#define RLX_CPU_KERNELS_VEC_MATH_SHARED

#include "vec_math.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "half.h"

namespace rlx::cpu::vec_simd {

// Coefficients in increasing order, scaled at compile time where a formula needs P / 2.
template <size_t N>
using Coeffs = std::array<float, N>;
template <size_t N>
constexpr Coeffs<N> scaled(Coeffs<N> c, float s) {
  for (float& v : c) v *= s;  // by 0.5: exact
  return c;
}

// erf(x) / x = P(x^2) on |x| <= 1: minimax fit of relative error 1.2e-9 (2^-29.6).
inline constexpr Coeffs<7> kErfSmall = {1.12837916573f,    -0.376126258279f,  0.112835851771f,
                                        -0.0268538128831f, 0.00518832922304f, -0.00080102056191f,
                                        7.8538973995e-05f};
// P - 1: erf x = x + x (P(x^2) - 1) rounds the large part x only once.
inline constexpr Coeffs<7> kErfSmallMinusOne = [] {
  Coeffs<7> c = kErfSmall;
  c[0] -= 1.0f;  // 0.12837917, exact in f32 (Sterbenz)
  return c;
}();
inline constexpr Coeffs<7> kErfSmallHalf = scaled(kErfSmall, 0.5f);
// erfc(t) e^(t^2) = P(t) / Q(t) on 0.5 <= t <= 10.5: minimax fit of relative error 2.8e-10.
inline constexpr Coeffs<6> kErfcxP = {1.000005f,   1.2662735f,  0.7658358f,
                                      0.24754587f, 0.03764271f, -1.9685674e-08f};
inline constexpr Coeffs<6> kErfcxPHalf = scaled(kErfcxP, 0.5f);
inline constexpr Coeffs<6> kErfcxQ = {1.0f,       2.3947034f, 2.4677355f,
                                      1.3902982f, 0.4388006f, 0.06671825f};

// pi/2 = kPio2Hi + kPio2Mid + kPio2Lo to 119 bits; Hi and Mid have 33 significant bits, so
// k * Hi and k * Mid are exact in f64 for |k| < 2^20.
inline constexpr double kPio2Hi = 1.5707963267341256;
inline constexpr double kPio2Mid = 6.077100506303966e-11;
inline constexpr double kPio2Lo = 2.0222662487959506e-21;
// Beyond this |x| (and for inf / NaN) sin, cos and tan run the scalar double libm instead.
inline constexpr float kTrigVectorMax = 1048576.0f;

}  // namespace rlx::cpu::vec_simd

#endif  // RLX_CPU_KERNELS_VEC_MATH_SHARED

HWY_BEFORE_NAMESPACE();
namespace rlx::cpu::vec_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

using half_simd::HWY_NAMESPACE::kF16Hardware;  // half-inl.h
using half_simd::HWY_NAMESPACE::Narrow;
using half_simd::HWY_NAMESPACE::RoundedBF16Bits;
using half_simd::HWY_NAMESPACE::Widen;

// Horner's rule with FMA, coefficients in increasing order.
template <class D, class V, size_t N>
HWY_INLINE V Poly(D d, V x, const Coeffs<N>& c) {
  V acc = hn::Set(d, c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) acc = hn::MulAdd(acc, x, hn::Set(d, c[i]));
  return acc;
}

// NaN lanes of x propagate into r (Highway's contrib math leaves them undefined).
HWY_INLINE VF KeepNaN(VF x, VF r) { return hn::IfThenElse(hn::IsNaN(x), x, r); }

// e^x; <= 1 ulp. Highway's Exp is valid up to 104; overflow is pinned at the last finite input.
HWY_INLINE VF ExpV(DF d, VF x) {
  VF r = hn::Exp(d, x);
  r = hn::IfThenElse(hn::Gt(x, hn::Set(d, 88.72283172607421875f)), hn::Inf(d), r);
  return KeepNaN(x, r);
}

// e^x - 1; <= 4 ulp. Tiny |x| returns x itself (exact there; keeps -0 and subnormals).
HWY_INLINE VF Expm1V(DF d, VF x) {
  VF r = hn::Expm1(d, x);
  r = hn::IfThenElse(hn::Gt(x, hn::Set(d, 88.72283172607421875f)), hn::Inf(d), r);
  r = hn::IfThenElse(hn::Lt(hn::Abs(x), hn::Set(d, 0x1p-25f)), x, r);
  return KeepNaN(x, r);
}

// ln x; <= 1 ulp on (0, inf) including subnormals.
HWY_INLINE VF LogV(DF d, VF x) {
  VF r = hn::Log(d, x);
  r = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), hn::Neg(hn::Inf(d)), r);
  r = hn::IfThenElse(hn::Eq(x, hn::Inf(d)), x, r);
  r = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::NaN(d), r);
  return KeepNaN(x, r);
}

// ln(1 + x); <= 3 ulp on (-1, inf). Highway returns x where 1 + x rounds to 1 (keeps -0).
HWY_INLINE VF Log1pV(DF d, VF x) {
  const VF minus_one = hn::Set(d, -1.0f);
  VF r = hn::Log1p(d, x);
  r = hn::IfThenElse(hn::Eq(x, minus_one), hn::Neg(hn::Inf(d)), r);
  r = hn::IfThenElse(hn::Eq(x, hn::Inf(d)), x, r);
  r = hn::IfThenElse(hn::Lt(x, minus_one), hn::NaN(d), r);
  return KeepNaN(x, r);
}

// tanh x; <= 3 ulp. Highway saturates to +-1 beyond 18.7 and keeps -0.
HWY_INLINE VF TanhV(DF d, VF x) { return KeepNaN(x, hn::Tanh(d, x)); }

// atan x; <= 3 ulp, atan(+-inf) = +-pi/2.
HWY_INLINE VF AtanV(DF d, VF x) { return KeepNaN(x, hn::Atan(d, x)); }

// x logistic(v) for v = vh + vl, vl a correction below an ulp of vh (0 when v is exact):
// e = e^-|v| = e^-|vh| (1 -+ vl) and s = 1 / (1 + e) give x s for v >= 0 and (x s) e below —
// no overflow, no cancellation, and the argument's own rounding removed. Where e is near the
// subnormal range, (x s) e would scale an already rounded subnormal e by |x|; there the result
// is ((x s) h) h with h = e^(-|v|/2), which rounds into the subnormal range only once.
HWY_INLINE VF XLogistic(DF d, VF x, VF vh, VF vl) {
  const VF one = hn::Set(d, 1.0f);
  const VF a = hn::Abs(vh);
  const VF c = hn::IfThenElse(hn::Lt(vh, hn::Zero(d)), vl, hn::Neg(vl));  // -|v| = -a + c
  const VF e0 = ExpV(d, hn::Neg(a));
  const VF e = hn::MulAdd(e0, c, e0);
  const VF xs = hn::Mul(x, hn::Div(one, hn::Add(one, e)));
  VF r = hn::IfThenElse(hn::Ge(vh, hn::Zero(d)), xs, hn::Mul(xs, e));
  const auto tiny = hn::Lt(vh, hn::Set(d, -80.0f));
  if (HWY_UNLIKELY(!hn::AllFalse(d, tiny))) {
    const VF half = hn::Set(d, 0.5f);
    const VF h0 = ExpV(d, hn::Neg(hn::Mul(half, a)));
    const VF h = hn::MulAdd(h0, hn::Mul(half, c), h0);
    r = hn::IfThenElse(tiny, hn::Mul(hn::Mul(xs, h), h), r);
  }
  return r;
}

// logistic x = 1 / (1 + e^-x); <= 3 ulp. logistic(-inf) = 0, logistic(inf) = 1.
HWY_INLINE VF LogisticV(DF d, VF x) { return XLogistic(d, hn::Set(d, 1.0f), x, hn::Zero(d)); }

// x logistic(x); <= 4 ulp. silu(-inf) = -inf * 0 = NaN, as the reference computes it.
HWY_INLINE VF SiluV(DF d, VF x) { return XLogistic(d, x, x, hn::Zero(d)); }

// log1p(e^-|x|) + max(x, 0), the reference's formula; <= 4 ulp.
HWY_INLINE VF SoftplusV(DF d, VF x) {
  const VF r = hn::Add(Log1pV(d, ExpV(d, hn::Neg(hn::Abs(x)))), hn::Max(x, hn::Zero(d)));
  return KeepNaN(x, r);
}

// The rounding error l of h = a * a, so that a^2 = h + l exactly: one FMA where the target
// has it, else Dekker's product with Veltkamp's split (exact for |a| < 2^100 without FMA).
HWY_INLINE VF SquareError(DF d, VF a, VF h) {
#if HWY_NATIVE_FMA
  static_cast<void>(d);
  return hn::MulSub(a, a, h);
#else
  const VF c = hn::Mul(a, hn::Set(d, 4097.0f));  // 2^12 + 1
  const VF hi = hn::Sub(c, hn::Sub(c, a));
  const VF lo = hn::Sub(a, hi);
  const VF t = hn::Add(hn::Sub(hn::Mul(hi, hi), h), hn::Mul(hn::Add(hi, hi), lo));
  return hn::Add(t, hn::Mul(lo, lo));
#endif
}

// e^-(s * a^2) for a >= 0 with a^2 taken exactly as h + l, so the argument carries no rounding
// error: e^-(s h) (1 - s l), where |s l| <= 2^-25 s h makes the dropped terms negligible. s is
// 1 or 0.5 (exact scalings).
HWY_INLINE VF ExpNegSquare(DF d, VF a, float s) {
  const VF h = hn::Mul(a, a);
  const VF l = SquareError(d, a, h);
  const VF e = ExpV(d, hn::Mul(hn::Set(d, -s), h));
  return hn::NegMulAdd(e, hn::Mul(hn::Set(d, s), l), e);
}

// erf x; <= 2 ulp. |x| < 1: x + x (P(x^2) - 1); else sign(x) (1 - e^-x^2 R(|x|)), where
// 1 - erfc is well conditioned (erfc(1) = 0.157). |x| is clamped to 10.5, where erf is +-1.
HWY_INLINE VF ErfV(DF d, VF x) {
  const VF one = hn::Set(d, 1.0f);
  const VF a = hn::Min(hn::Abs(x), hn::Set(d, 10.5f));
  const auto small = hn::Lt(a, one);
  const VF near = hn::MulAdd(a, Poly(d, hn::Mul(a, a), kErfSmallMinusOne), a);
  VF r = near;
  if (!hn::AllTrue(d, small)) {
    const VF rt = hn::Div(Poly(d, a, kErfcxP), Poly(d, a, kErfcxQ));
    r = hn::IfThenElse(small, near, hn::NegMulAdd(ExpNegSquare(d, a, 1.0f), rt, one));
  }
  return KeepNaN(x, hn::CopySignToAbs(r, x));
}

// x/2 (1 + erf(z)), z = x / sqrt 2; <= 6 ulp. Three pieces, so that no piece cancels:
//   z < -0.5:      (x R(|z|)/2) e^(-x^2/2), i.e. x/2 erfc(|z|) (the exponent exact in x);
//   -0.5 <= z < 1: x (1/2 + z P(z^2)/2);
//   z >= 1:        x (1 - e^(-x^2/2) R(z)/2).
// gelu(-inf) = -inf * 0 = NaN and gelu(x) = -0 once the tail underflows, as the reference.
HWY_INLINE VF GeluV(DF d, VF x) {
  const VF one = hn::Set(d, 1.0f);
  const VF z = hn::Mul(x, hn::Set(d, 0.70710678118654752f));
  const VF t = hn::Min(hn::Abs(z), hn::Set(d, 10.5f));
  const auto low = hn::Lt(z, hn::Set(d, -0.5f));
  const auto mid = hn::And(hn::Not(low), hn::Lt(z, one));
  VF r = hn::Mul(x, hn::MulAdd(z, Poly(d, hn::Mul(t, t), kErfSmallHalf), hn::Set(d, 0.5f)));
  if (!hn::AllTrue(d, mid)) {
    const VF a = hn::Min(hn::Abs(x), hn::Set(d, 15.0f));  // e^(-x^2/2) is 0 beyond
    const VF e = ExpNegSquare(d, a, 0.5f);
    const VF rh = hn::Div(Poly(d, t, kErfcxPHalf), Poly(d, t, kErfcxQ));
    const VF tail = hn::Mul(hn::Mul(x, rh), e);
    const VF upper = hn::Mul(x, hn::NegMulAdd(e, rh, one));
    r = hn::IfThenElse(mid, r, hn::IfThenElse(low, tail, upper));
  }
  return KeepNaN(x, r);
}

// f64 -> f32 to nearest even with IEEE overflow to +-inf: DemoteTo on the SIMD targets;
// Highway's scalar and EMU128 emulations saturate at +-FLT_MAX instead (even for inf), so
// those cast lane by lane.
template <class DH, class VD>
HWY_INLINE hn::Vec<DH> DemoteF64(DH dh, VD v) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  const hn::Rebind<double, DH> dd;
  double in[16];
  float out[16];
  hn::StoreU(v, dd, in);
  for (size_t i = 0; i < hn::Lanes(dd); ++i) out[i] = static_cast<float>(in[i]);
  return hn::LoadU(dh, out);
#else
  return hn::DemoteTo(dh, v);
#endif
}

// v rounded to odd at f32 precision, still in f64: the low 29 of the 52 significand bits are
// dropped and the last kept bit is set when any was nonzero. The f32 DemoteTo of it is then
// exact (in the normal range), and one more rounding to f16 / bf16, which keep far fewer bits,
// equals rounding v directly. inf stays inf, NaN stays NaN.
template <class DD, class VD>
HWY_INLINE VD RoundToOddF32(DD dd, VD v) {
  const hn::RebindToUnsigned<DD> du;
  const auto bits = hn::BitCast(du, v);
  const auto low = hn::Set(du, (uint64_t{1} << 29) - 1);
  const auto sticky = hn::Not(hn::Eq(hn::And(bits, low), hn::Zero(du)));
  const auto odd = hn::Or(hn::AndNot(low, bits), hn::Set(du, uint64_t{1} << 29));
  return hn::BitCast(dd, hn::IfThenElse(sticky, odd, bits));
}

// f(f64 lanes) on the two halves of an f32 vector (the one lane on HWY_SCALAR), each rounded
// back to f32 once: to nearest even, or to odd (kOdd) for a result rounded again to 16 bits.
template <bool kOdd = false, class F>
HWY_INLINE VF ViaF64(DF d, VF x, F f) {
  auto g = [&f](auto dd, auto w) HWY_ATTR {
    if constexpr (kOdd)
      return RoundToOddF32(dd, f(dd, w));
    else
      return f(dd, w);
  };
#if HWY_TARGET == HWY_SCALAR
  const hn::Rebind<double, DF> dd;
  return DemoteF64(d, g(dd, hn::PromoteTo(dd, x)));
#else
  const hn::Half<DF> dh;
  const hn::Repartition<double, DF> dd;
  const auto lo = DemoteF64(dh, g(dd, hn::PromoteTo(dd, hn::LowerHalf(dh, x))));
  const auto hi = DemoteF64(dh, g(dd, hn::PromoteTo(dd, hn::UpperHalf(dh, x))));
  return hn::Combine(d, hi, lo);
#endif
}

// v = f(f64 lanes of x) split into f32 hi + lo (hi = v rounded, lo = the rest rounded; lo = 0
// where hi is not finite).
template <class F>
HWY_INLINE void SplitViaF64(DF d, VF x, F f, VF& hi, VF& lo) {
  auto split = [&f](auto dd, auto dh, auto w, auto& h, auto& l) HWY_ATTR {
    const auto v = f(dd, hn::PromoteTo(dd, w));
    h = DemoteF64(dh, v);
    l = DemoteF64(dh, hn::Sub(v, hn::PromoteTo(dd, h)));
  };
#if HWY_TARGET == HWY_SCALAR
  split(hn::Rebind<double, DF>(), d, x, hi, lo);
#else
  const hn::Half<DF> dh;
  const hn::Repartition<double, DF> dd;
  hn::Vec<decltype(dh)> h0, l0, h1, l1;
  split(dd, dh, hn::LowerHalf(dh, x), h0, l0);
  split(dd, dh, hn::UpperHalf(dh, x), h1, l1);
  hi = hn::Combine(d, h1, h0);
  lo = hn::Combine(d, l1, l0);
#endif
  lo = hn::IfThenElseZero(hn::IsFinite(hi), lo);
}

// x/2 (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as x logistic(2u): the same
// function without the cancellation of 1 + tanh u for u << 0. 2u = x (A + B x^2) is taken in
// f64 and kept as an f32 pair, so its rounding is not amplified where logistic is steep;
// <= 4 ulp.
HWY_INLINE VF GeluTanhV(DF d, VF x) {
  constexpr double kA = 1.5957691216057308;  // 2 sqrt(2/pi)
  VF vh, vl;
  SplitViaF64(
      d, x,
      [](auto dd, auto w) HWY_ATTR {
        return hn::Mul(w, hn::MulAdd(hn::Set(dd, kA * 0.044715), hn::Mul(w, w), hn::Set(dd, kA)));
      },
      vh, vl);
  return XLogistic(d, x, vh, vl);
}

// sin, cos and tan of f32 lanes in f64: x = k pi/2 + r with the three-part pi/2 above (exact
// products), |r| <= pi/4 + tiny, then Taylor polynomials of sin r (to r^13, truncation
// < 2^-45 relative) and cos r (to r^14, < 2^-49), a quadrant select, and one rounding to f32:
// <= 1 ulp (correctly rounded except within 2^-20 ulp of a tie).
enum class Trig { kSin, kCos, kTan };

template <Trig kFn, class DD, class VD = hn::Vec<DD>>
HWY_INLINE VD TrigF64(DD dd, VD x) {
  const hn::RebindToSigned<DD> di;
  const VD k = hn::Round(hn::Mul(x, hn::Set(dd, 0.6366197723675814)));  // 2/pi
  VD r = hn::NegMulAdd(k, hn::Set(dd, kPio2Hi), x);
  r = hn::NegMulAdd(k, hn::Set(dd, kPio2Mid), r);
  r = hn::NegMulAdd(k, hn::Set(dd, kPio2Lo), r);
  const VD r2 = hn::Mul(r, r);
  VD ps = hn::Set(dd, 1.0 / 6227020800.0);  // 1/13!
  for (double c : {-1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0})
    ps = hn::MulAdd(ps, r2, hn::Set(dd, c));
  const VD s = hn::MulAdd(hn::Mul(r2, r), ps, r);
  VD pc = hn::Set(dd, 1.0 / 87178291200.0);  // 1/14!
  for (double c :
       {-1.0 / 479001600.0, 1.0 / 3628800.0, -1.0 / 40320.0, 1.0 / 720.0, -1.0 / 24.0, 0.5})
    pc = hn::MulAdd(pc, r2, hn::Set(dd, c));
  const VD c = hn::NegMulAdd(r2, pc, hn::Set(dd, 1.0));  // 1 - r^2 (1/2 - r^2/24 + ...)
  const auto q = hn::ConvertTo(di, k);
  const auto odd = hn::RebindMask(dd, hn::Eq(hn::And(q, hn::Set(di, 1)), hn::Set(di, 1)));
  if constexpr (kFn == Trig::kTan) {
    return hn::IfThenElse(odd, hn::Neg(hn::Div(c, s)), hn::Div(s, c));
  } else {
    // sin: q = 0..3 -> s, c, -s, -c; cos: q = 0..3 -> c, -s, -c, s.
    const auto qs = kFn == Trig::kSin ? q : hn::Add(q, hn::Set(di, 1));
    const auto negate = hn::RebindMask(dd, hn::Eq(hn::And(qs, hn::Set(di, 2)), hn::Set(di, 2)));
    const VD v = kFn == Trig::kSin ? hn::IfThenElse(odd, c, s) : hn::IfThenElse(odd, s, c);
    return hn::IfThenElse(negate, hn::Neg(v), v);
  }
}

template <Trig kFn>
HWY_INLINE VF TrigV(DF d, VF x) {
  VF r = ViaF64(d, x, [](auto dd, auto w) HWY_ATTR { return TrigF64<kFn>(dd, w); });
  // sin(+-0) = +-0 and tan(+-0) = +-0 (the reduction's FMA turns -0 into +0).
  if constexpr (kFn != Trig::kCos) r = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), x, r);
  const auto far = hn::Not(hn::Le(hn::Abs(x), hn::Set(d, kTrigVectorMax)));  // incl. inf, NaN
  if (HWY_UNLIKELY(!hn::AllFalse(d, far))) {
    HWY_ALIGN float xs[HWY_LANES(float)], rs[HWY_LANES(float)];
    hn::Store(x, d, xs);
    hn::Store(r, d, rs);
    for (size_t i = 0; i < hn::Lanes(d); ++i) {
      if (std::fabs(xs[i]) <= kTrigVectorMax) continue;
      const double v = xs[i];
      rs[i] = static_cast<float>(kFn == Trig::kSin   ? std::sin(v)
                                 : kFn == Trig::kCos ? std::cos(v)
                                                     : std::tan(v));
    }
    r = hn::Load(d, rs);
  }
  return r;
}

// Simple lanewise functions (exact, see vec_math.h).
HWY_INLINE VF SignV(DF d, VF x) {
  const auto keep = hn::Or(hn::IsNaN(x), hn::Eq(x, hn::Zero(d)));
  return hn::IfThenElse(keep, x, hn::CopySign(hn::Set(d, 1.0f), x));
}
HWY_INLINE VF MaxV(VF a, VF b) {
  return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::Gt(a, b), a, b));
}
HWY_INLINE VF MinV(VF a, VF b) {
  return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::Lt(a, b), a, b));
}

// y[i] = f(x[i]) over whole vectors, then the tail with masked loads and stores (no reads or
// writes past n).
template <class F>
HWY_INLINE void Map(const float* x, float* y, size_t n, F f) {
  const DF d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) {
    const auto m = hn::FirstN(d, n - i);
    hn::BlendedStore(f(d, hn::MaskedLoad(m, d, x + i)), m, d, y + i);
  }
}

// y[i] = f(a[i], b[i]), as Map.
template <class F>
HWY_INLINE void Map2(const float* a, const float* b, float* y, size_t n, F f) {
  const DF d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(f(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  if (i < n) {
    const auto m = hn::FirstN(d, n - i);
    hn::BlendedStore(f(hn::MaskedLoad(m, d, a + i), hn::MaskedLoad(m, d, b + i)), m, d, y + i);
  }
}

#define RLX_VEC_FN(fn, expr) \
  case VecFn::fn:            \
    return Map(x, y, n, [](DF d, VF v) HWY_ATTR { return expr; })

void Apply(VecFn fn, const float* x, float* y, int64_t count) {
  const auto n = static_cast<size_t>(count);
  switch (fn) {
    RLX_VEC_FN(kNeg, (static_cast<void>(d), hn::Neg(v)));
    RLX_VEC_FN(kAbs, (static_cast<void>(d), hn::Abs(v)));
    RLX_VEC_FN(kSign, SignV(d, v));
    // Rounding keeps the sign (floor(0.5) = +0, ceil(-0.5) = round(-0.5) = -0); CopySign pins
    // it where a target's emulation loses the sign of a zero result.
    RLX_VEC_FN(kFloor, (static_cast<void>(d), hn::CopySign(hn::Floor(v), v)));
    RLX_VEC_FN(kCeil, (static_cast<void>(d), hn::CopySign(hn::Ceil(v), v)));
    RLX_VEC_FN(kRound, (static_cast<void>(d), hn::CopySign(hn::Round(v), v)));
    RLX_VEC_FN(kRelu, MaxV(v, hn::Zero(d)));
    RLX_VEC_FN(kSqrt, (static_cast<void>(d), hn::Sqrt(v)));
    RLX_VEC_FN(kExp, ExpV(d, v));
    RLX_VEC_FN(kExpm1, Expm1V(d, v));
    RLX_VEC_FN(kLog, LogV(d, v));
    RLX_VEC_FN(kLog1p, Log1pV(d, v));
    RLX_VEC_FN(kSin, TrigV<Trig::kSin>(d, v));
    RLX_VEC_FN(kCos, TrigV<Trig::kCos>(d, v));
    RLX_VEC_FN(kTan, TrigV<Trig::kTan>(d, v));
    RLX_VEC_FN(kTanh, TanhV(d, v));
    RLX_VEC_FN(kAtan, AtanV(d, v));
    RLX_VEC_FN(kLogistic, LogisticV(d, v));
    RLX_VEC_FN(kErf, ErfV(d, v));
    RLX_VEC_FN(kGelu, GeluV(d, v));
    RLX_VEC_FN(kGeluTanh, GeluTanhV(d, v));
    RLX_VEC_FN(kSilu, SiluV(d, v));
    RLX_VEC_FN(kSoftplus, SoftplusV(d, v));
  }
}
#undef RLX_VEC_FN

void Binary(VecBinary op, const float* a, const float* b, float* y, int64_t count) {
  const auto n = static_cast<size_t>(count);
  switch (op) {
    case VecBinary::kAdd:
      return Map2(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Add(u, v); });
    case VecBinary::kSub:
      return Map2(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Sub(u, v); });
    case VecBinary::kMul:
      return Map2(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Mul(u, v); });
    case VecBinary::kDiv:
      return Map2(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Div(u, v); });
    case VecBinary::kMax:
      return Map2(a, b, y, n, MaxV);
    case VecBinary::kMin:
      return Map2(a, b, y, n, MinV);
  }
}

// y[i] = cmp(a[i], b[i]) as bytes: the mask becomes i32 0 / 1 lanes, narrowed to u8.
template <class Cmp>
HWY_INLINE void CompareLoop(const float* a, const float* b, uint8_t* y, size_t n, Cmp cmp) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t lanes = hn::Lanes(d);
  auto bytes = [&](VF u, VF v) HWY_ATTR {
    return hn::DemoteTo(du8, hn::IfThenElseZero(hn::RebindMask(di, cmp(u, v)), hn::Set(di, 1)));
  };
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(bytes(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), du8, y + i);
  if (i < n) {
    const auto m = hn::FirstN(d, n - i);
    hn::BlendedStore(bytes(hn::MaskedLoad(m, d, a + i), hn::MaskedLoad(m, d, b + i)),
                     hn::FirstN(du8, n - i), du8, y + i);
  }
}

void Compare(VecCompare op, const float* a, const float* b, uint8_t* y, int64_t count) {
  const auto n = static_cast<size_t>(count);
  switch (op) {
    case VecCompare::kEq:
      return CompareLoop(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Eq(u, v); });
    case VecCompare::kNe:
      // Not(Eq): Highway's Ne is the ordered compare, false for NaN operands.
      return CompareLoop(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Not(hn::Eq(u, v)); });
    case VecCompare::kLt:
      return CompareLoop(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Lt(u, v); });
    case VecCompare::kLe:
      return CompareLoop(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Le(u, v); });
    case VecCompare::kGt:
      return CompareLoop(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Gt(u, v); });
    case VecCompare::kGe:
      return CompareLoop(a, b, y, n, [](VF u, VF v) HWY_ATTR { return hn::Ge(u, v); });
  }
}

void Select(const uint8_t* pred, const float* a, const float* b, float* y, int64_t count) {
  const auto n = static_cast<size_t>(count);
  const DF d;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t lanes = hn::Lanes(d);
  auto mask = [&](hn::Vec<decltype(du8)> p) HWY_ATTR {
    return hn::RebindMask(d, hn::Ne(hn::PromoteTo(di, p), hn::Zero(di)));
  };
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(
        hn::IfThenElse(mask(hn::LoadU(du8, pred + i)), hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d,
        y + i);
  if (i < n) {
    const auto m = hn::FirstN(d, n - i);
    // Not MaskedLoad: without AVX-512 Highway has no masked load of 8-bit lanes and reads the
    // whole vector, past the end of `pred` (AddressSanitizer's heap-buffer-overflow).
    alignas(16) uint8_t tail[hn::MaxLanes(du8)] = {};
    std::memcpy(tail, pred + i, n - i);
    const auto p = hn::LoadU(du8, tail);
    hn::BlendedStore(
        hn::IfThenElse(mask(p), hn::MaskedLoad(m, d, a + i), hn::MaskedLoad(m, d, b + i)), m, d,
        y + i);
  }
}

void Clamp(const float* lo, const float* x, const float* hi, float* y, int64_t count) {
  const auto n = static_cast<size_t>(count);
  const DF d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(MinV(MaxV(hn::LoadU(d, x + i), hn::LoadU(d, lo + i)), hn::LoadU(d, hi + i)), d,
               y + i);
  if (i < n) {
    const auto m = hn::FirstN(d, n - i);
    const VF v = MinV(MaxV(hn::MaskedLoad(m, d, x + i), hn::MaskedLoad(m, d, lo + i)),
                      hn::MaskedLoad(m, d, hi + i));
    hn::BlendedStore(v, m, d, y + i);
  }
}

template <bool kOdd>
void RsqrtLoop(const float* x, float* y, size_t n) {
  Map(x, y, n, [](DF d, VF v) HWY_ATTR {
    return ViaF64<kOdd>(
        d, v, [](auto dd, auto w) HWY_ATTR { return hn::Div(hn::Set(dd, 1.0), hn::Sqrt(w)); });
  });
}

void Rsqrt(const float* x, float* y, int64_t count, DType result) {
  const auto n = static_cast<size_t>(count);
  return result == DType::f32 ? RsqrtLoop<false>(x, y, n) : RsqrtLoop<true>(x, y, n);
}

template <bool kOdd>
void LeakyReluLoop(double alpha, const float* x, float* y, size_t n) {
  Map(x, y, n, [alpha](DF d, VF v) HWY_ATTR {
    const VF scaled = ViaF64<kOdd>(
        d, v, [alpha](auto dd, auto w) HWY_ATTR { return hn::Mul(hn::Set(dd, alpha), w); });
    return hn::IfThenElse(hn::Ge(v, hn::Zero(d)), v, scaled);
  });
}

void LeakyRelu(double alpha, const float* x, float* y, int64_t count, DType result) {
  const auto n = static_cast<size_t>(count);
  return result == DType::f32 ? LeakyReluLoop<false>(alpha, x, y, n)
                              : LeakyReluLoop<true>(alpha, x, y, n);
}

// The array conversions of half.h: half-inl.h's, on the int64_t counts of the public API.
void LoadF16(const f16* src, float* dst, int64_t n) { Widen(src, dst, static_cast<size_t>(n)); }
void StoreF16(const float* src, f16* dst, int64_t n) { Narrow(src, dst, static_cast<size_t>(n)); }
void LoadBF16(const bf16* src, float* dst, int64_t n) { Widen(src, dst, static_cast<size_t>(n)); }
void StoreBF16(const float* src, bf16* dst, int64_t n) { Narrow(src, dst, static_cast<size_t>(n)); }

void RoundTo(DType t, float* x, int64_t count) {
  const auto n = static_cast<size_t>(count);
  if (t == DType::bf16) {
    const hn::RebindToUnsigned<DF> du32;
    return Map(x, x, n, [du32](DF d, VF v) HWY_ATTR {
      return hn::BitCast(d, hn::And(RoundedBF16Bits(d, v), hn::Set(du32, 0xffff0000u)));
    });
  }
  size_t i = 0;
  if constexpr (kF16Hardware) {
    const DF d;
    const hn::Rebind<hwy::float16_t, DF> dh;
    for (; i + hn::Lanes(d) <= n; i += hn::Lanes(d))
      hn::StoreU(hn::PromoteTo(d, hn::DemoteTo(dh, hn::LoadU(d, x + i))), d, x + i);
  }
  for (; i < n; ++i) x[i] = to_f32(from_f32<f16>(x[i]));
}

}  // namespace HWY_NAMESPACE
}  // namespace rlx::cpu::vec_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rlx::cpu {
namespace vec_simd {
HWY_EXPORT(Apply);
HWY_EXPORT(Binary);
HWY_EXPORT(Compare);
HWY_EXPORT(Select);
HWY_EXPORT(Clamp);
HWY_EXPORT(Rsqrt);
HWY_EXPORT(LeakyRelu);
HWY_EXPORT(RoundTo);
HWY_EXPORT(LoadF16);
HWY_EXPORT(StoreF16);
HWY_EXPORT(LoadBF16);
HWY_EXPORT(StoreBF16);
}  // namespace vec_simd

void vec_apply(VecFn f, const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::Apply)(f, x, y, n);
}

void vec_binary(VecBinary op, const float* a, const float* b, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::Binary)(op, a, b, y, n);
}
void vec_compare(VecCompare op, const float* a, const float* b, uint8_t* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::Compare)(op, a, b, y, n);
}
void vec_select(const uint8_t* pred, const float* a, const float* b, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::Select)(pred, a, b, y, n);
}
void vec_clamp(const float* lo, const float* x, const float* hi, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::Clamp)(lo, x, hi, y, n);
}
void vec_rsqrt(const float* x, float* y, int64_t n, DType result) {
  HWY_DYNAMIC_DISPATCH(vec_simd::Rsqrt)(x, y, n, result);
}
void vec_leaky_relu(double alpha, const float* x, float* y, int64_t n, DType result) {
  HWY_DYNAMIC_DISPATCH(vec_simd::LeakyRelu)(alpha, x, y, n, result);
}
void vec_round_to(DType t, float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::RoundTo)(t, x, n);
}

void load_f32(const f16* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::LoadF16)(src, dst, n);
}
void load_f32(const bf16* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::LoadBF16)(src, dst, n);
}
void store_f32(const float* src, f16* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::StoreF16)(src, dst, n);
}
void store_f32(const float* src, bf16* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(vec_simd::StoreBF16)(src, dst, n);
}

}  // namespace rlx::cpu
#endif  // HWY_ONCE
