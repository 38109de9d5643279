// Scalar semantics of rlx's elementwise ops, defined once: the reference evaluator
// (src/ir/eval/) computes every element with these functions, and so do the CPU backend's
// scalar kernels (the f64, integer and bool steps of src/backends/cpu/kernels/elementwise.cc),
// which is why those match the evaluator bit for bit.
//
// Float functions take and return double: the evaluator computes every float op in double and
// rounds once to the result dtype. Integer functions are templates on the C++ integer type T;
// the evaluator instantiates them for int64_t (it reads every integer element as int64 and
// Tensor::set_i64 wraps the result to the element dtype), the CPU kernels for the element type
// itself. Both give the same value, because wrapping commutes with +, -, * and the special
// cases below are stated for T. The rules are jax.lax's on XLA (StableHLO's spec where XLA
// leaves nothing open).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>

namespace rlx::scalar {

// ---- integer helpers

/// `v` reduced modulo 2^bits(T) to T (two's complement), the wrap-around of integer overflow.
template <std::integral T>
T wrap(uint64_t v) {
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
}

// ---- unary ops on floats and integers

/// lax.neg: -x; integers wrap (neg(INT_MIN) = INT_MIN, neg of unsigned is 2^bits - x).
template <class T>
T neg(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return -x;
  else
    return wrap<T>(0 - static_cast<uint64_t>(x));
}

/// lax.abs: |x| (fabs: abs(-0) = +0, NaN stays NaN); abs(INT_MIN) wraps to INT_MIN; the
/// identity on unsigned types.
template <class T>
T abs(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return std::fabs(x);
  else if constexpr (std::is_unsigned_v<T>)
    return x;
  else
    return x < 0 ? neg(x) : x;
}

/// lax.sign: -1, 0 or 1; for floats NaN -> NaN and +-0 -> +-0 (the operand itself).
template <class T>
T sign(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(x) || x == 0 ? x : std::copysign(T{1}, x);
  else
    return static_cast<T>((x > 0) - (x < 0));
}

/// lax.max / lax.min on floats: the default quiet NaN when either operand is NaN, else
/// `a > b ? a : b` (`a < b ? a : b`), so max(-0, +0) = +0 and max(+0, -0) = -0.
inline double max_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}
inline double min_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}

/// relu = lax.max(x, 0): NaN -> NaN, -0 -> +0; integers max(x, 0).
template <class T>
T relu(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return max_nan(x, 0.0);
  else
    return std::max<T>(x, 0);
}

/// lax.not: logical not of a bool held as 0 / 1 (`logical`), else bitwise not.
template <std::integral T>
T bit_not(T x) {
  return static_cast<T>(~x);
}
template <std::integral T>
T logical_not(T x) {
  return static_cast<T>(x == 0);
}

// ---- float math (double): the C library's functions, each named by its op

inline double exp(double x) { return std::exp(x); }
inline double expm1(double x) { return std::expm1(x); }
/// log(0) = -inf, log(x < 0) = NaN.
inline double log(double x) { return std::log(x); }
inline double log1p(double x) { return std::log1p(x); }
/// sqrt(-0) = -0, sqrt(x < 0) = NaN.
inline double sqrt(double x) { return std::sqrt(x); }
/// lax.rsqrt as 1 / sqrt(x) in double (rsqrt(+-0) = +-inf).
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline double sin(double x) { return std::sin(x); }
inline double cos(double x) { return std::cos(x); }
inline double tan(double x) { return std::tan(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double atan(double x) { return std::atan(x); }
inline double erf(double x) { return std::erf(x); }
/// cbrt: C cbrt (correctly signed for negative x, cbrt(-0) = -0, odd).
inline double cbrt(double x) { return std::cbrt(x); }
inline double floor(double x) { return std::floor(x); }
inline double ceil(double x) { return std::ceil(x); }
/// jnp.round / lax.round(TO_NEAREST_EVEN): std::nearbyint in the default rounding mode rounds
/// half to even (and keeps the sign of a zero result).
inline double round(double x) { return std::nearbyint(x); }

/// lax.logistic: 1 / (1 + e^-x); for x < 0 computed as e^x / (1 + e^x), which cannot
/// overflow.
inline double logistic(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

/// Exact GELU, jax.nn.gelu(approximate=False): x/2 (1 + erf(x / sqrt 2)).
inline double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

/// tanh-approximate GELU, jax.nn.gelu(approximate=True):
/// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

/// jax.nn.silu: x * logistic(x) (silu(-inf) = -inf * 0 = NaN).
inline double silu(double x) { return x * logistic(x); }

/// jax.nn.softplus: log(1 + e^x), computed as log1p(e^-|x|) + max(x, 0) so e^x never
/// overflows. NaN gives the default quiet NaN, stated explicitly: the sum of two NaNs is the
/// NaN of whichever operand the compiler puts first.
inline double softplus(double x) {
  if (std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
  return std::log1p(std::exp(-std::fabs(x))) + max_nan(x, 0.0);
}

/// jax.nn.leaky_relu: x if x >= 0 else alpha * x (NaN -> alpha * NaN = NaN).
inline double leaky_relu(double x, double alpha) { return x >= 0 ? x : alpha * x; }

// ---- binary ops on floats and integers (integers wrap)

template <class T>
T add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return a + b;
  else
    return wrap<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
template <class T>
T sub(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return a - b;
  else
    return wrap<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
template <class T>
T mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return a * b;
  else
    return wrap<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

/// lax.div. Floats: IEEE a / b. Integers (XLA): truncation toward zero, x / 0 = -1 (all bits
/// set, so 255 for u8) and INT_MIN / -1 = INT_MIN (dividing by -1 is a wrapping negation).
template <class T>
T div(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return x / y;
  } else {
    if (y == 0) return static_cast<T>(-1);
    if constexpr (std::is_signed_v<T>)
      if (y == -1) return neg(x);
    return static_cast<T>(x / y);
  }
}

/// lax.rem: the remainder with the sign of the dividend. Floats: C fmod (exact). Integers
/// (XLA): x rem 0 = x and x rem -1 = 0 (so INT_MIN rem -1 does not trap).
template <class T>
T rem(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmod(x, y);
  } else {
    if (y == 0) return x;
    if constexpr (std::is_signed_v<T>)
      if (y == -1) return 0;
    return static_cast<T>(x % y);
  }
}

/// lax.pow. Floats: C pow. Integers: exponentiation by squaring with wrap-around; a negative
/// exponent gives 0 except for the bases 1 (-> 1) and -1 (-> -1 for odd exponents, 1 for even
/// ones), as jnp.power on integers.
template <class T>
T pow(T base, T exponent) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::pow(base, exponent);
  } else {
    const auto b = static_cast<int64_t>(base);
    auto e = static_cast<int64_t>(exponent);
    if (e < 0) {
      if (b == 1) return 1;
      if (b == -1) return static_cast<T>((e & 1) ? -1 : 1);
      return 0;
    }
    uint64_t acc = 1, sq = static_cast<uint64_t>(b);
    for (; e != 0; e >>= 1) {
      if (e & 1) acc *= sq;
      sq *= sq;
    }
    return wrap<T>(acc);
  }
}

/// lax.max / lax.min: max_nan / min_nan on floats, std::max / std::min on integers.
template <class T>
T max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return max_nan(a, b);
  else
    return std::max(a, b);
}
template <class T>
T min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return min_nan(a, b);
  else
    return std::min(a, b);
}

/// lax.clamp(lo, x, hi) = min(max(x, lo), hi), with the NaN-propagating max / min on floats.
template <class T>
T clamp(T lo, T x, T hi) {
  return min(max(x, lo), hi);
}

// ---- conversions (the convert op)

/// Float -> integer T: truncation toward zero, saturating at T's range, NaN -> 0
/// (lax.convert_element_type on XLA CPU).
template <std::integral T>
T saturate(double v) {
  if (std::isnan(v)) return 0;
  if constexpr (std::is_same_v<T, int64_t>) {
    // 2^63 is not representable in int64: saturate before the cast.
    if (v >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
    if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(v);
  } else {
    constexpr auto lo = static_cast<double>(std::numeric_limits<T>::min());
    constexpr auto hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::min();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

/// int64 -> double with round-to-odd: exact below 2^53; above, the low bits are truncated and
/// the last kept bit is set when any dropped bit was nonzero. Rounding that double once more to
/// a format with at most 51 significand bits (f32, f16, bf16) gives exactly the correctly
/// rounded value of the integer, so int -> narrow float rounds once, as `convert` requires.
inline double to_double_round_odd(int64_t v) {
  uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int width = std::bit_width(mag);
  if (width <= 53) return static_cast<double>(v);
  int drop = width - 53;
  uint64_t kept = mag >> drop;
  if ((mag & ((uint64_t{1} << drop) - 1)) != 0) kept |= 1;
  double d = std::ldexp(static_cast<double>(kept), drop);
  return v < 0 ? -d : d;
}

}  // namespace rlx::scalar
