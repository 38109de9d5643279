// Internal: vectorized f32 array math of the CPU backend — transcendentals and activations,
// arithmetic, comparisons, select / clamp and f16 / bf16 rounding. Highway SIMD code picked at
// run time for the best x86 target (vec_math.cc).
//
// Every function matches the reference evaluator's special values (NaN in -> NaN out, the
// infinities and signed zeros of its double-precision formula). Accuracies are stated against
// the exact function and checked over dense f32 sweeps in tests/backends/cpu/vec_math_test.cc.
// Arrays may be the same array (in place) but must not otherwise overlap.
#pragma once

#include <cstdint>

#include "rlx/ir/dtype.h"

namespace rlx::cpu {

/// Unary f32 functions. Errors are max ulp of the f32 result against the exact value (ulp
/// 2^-149 for subnormal results) over every f32 input, as asserted by vec_math_test.cc (the
/// max measured there in brackets); "exact" means bit-equal to the reference evaluator, which
/// computes in double and rounds once.
enum class VecFn : uint8_t {
  kNeg,       ///< -x; exact.
  kAbs,       ///< |x|; exact.
  kSign,      ///< -1, 1, or x for +-0 and NaN; exact.
  kFloor,     ///< exact.
  kCeil,      ///< exact.
  kRound,     ///< to nearest, ties to even; exact.
  kRelu,      ///< x > 0 ? x : +0, NaN -> NaN (lax.max(x, 0)); exact.
  kSqrt,      ///< exact (IEEE sqrt).
  kExp,       ///< e^x; <= 1 ulp [0.99] (Highway Exp); inf above 88.7228, 0 below -103.98.
  kExpm1,     ///< e^x - 1; <= 4 ulp [3.33] (Highway Expm1).
  kLog,       ///< ln x; <= 1 ulp [0.89] (Highway Log); log(+-0) = -inf, log(x < 0) = NaN.
  kLog1p,     ///< ln(1 + x); <= 3 ulp [2.34] (Highway Log1p); -1 -> -inf, x < -1 -> NaN.
  kSin,       ///< sin x; <= 1 ulp [0.50]: reduction and Taylor kernel in f64, rounded once.
  kCos,       ///< cos x; <= 1 ulp [0.50], as sin.
  kTan,       ///< tan x; <= 1 ulp [0.50]: sin / cos in f64, rounded once.
  kTanh,      ///< tanh x; <= 3 ulp [2.64] (Highway Tanh).
  kAtan,      ///< atan x; <= 3 ulp [2.48] (Highway Atan).
  kLogistic,  ///< 1 / (1 + e^-x); <= 3 ulp [2.43].
  kErf,       ///< erf x; <= 2 ulp [1.88] (minimax fits, vec_math.cc).
  kGelu,      ///< x/2 (1 + erf(x / sqrt 2)); <= 6 ulp [5.63]; the negative tail via erfc.
  kGeluTanh,  ///< x/2 (1 + tanh(u)), computed as x logistic(2u); <= 4 ulp [3.71].
  kSilu,      ///< x logistic(x); <= 4 ulp [2.95].
  kSoftplus,  ///< log1p(e^-|x|) + max(x, 0); <= 4 ulp [2.60].
};

/// y[i] = f(x[i]) for i < n.
void vec_apply(VecFn f, const float* x, float* y, int64_t n);

/// Binary f32 arithmetic; all exact (IEEE f32 ops are correctly rounded). max / min return NaN
/// when either operand is NaN and otherwise `a > b ? a : b` / `a < b ? a : b` (lax.max / min).
enum class VecBinary : uint8_t { kAdd, kSub, kMul, kDiv, kMax, kMin };
/// y[i] = a[i] op b[i] for i < n.
void vec_binary(VecBinary op, const float* a, const float* b, float* y, int64_t n);

/// IEEE comparisons (false with a NaN operand, except ne).
enum class VecCompare : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
/// y[i] = a[i] op b[i] as a bool byte (0 / 1) for i < n.
void vec_compare(VecCompare op, const float* a, const float* b, uint8_t* y, int64_t n);

/// y[i] = pred[i] ? a[i] : b[i] (pred bytes 0 = false), bit for bit.
void vec_select(const uint8_t* pred, const float* a, const float* b, float* y, int64_t n);
/// y[i] = min(max(x[i], lo[i]), hi[i]) with vec_binary's NaN-propagating max / min.
void vec_clamp(const float* lo, const float* x, const float* hi, float* y, int64_t n);

// The functions below compute in f64 and round once, so they are exact for every result dtype:
// for `result` f32, y holds the rounded result; for f16 / bf16 it holds the f64 value rounded
// to odd at f32 precision (truncated, last bit set when inexact), which vec_round_to /
// store_f32 then round to the correctly rounded 16-bit value (one rounding in effect; for bf16
// results below 2^-126 the f32 subnormal grid can round twice).

/// y[i] = 1 / sqrt(x[i]).
void vec_rsqrt(const float* x, float* y, int64_t n, DType result);
/// y[i] = x[i] >= 0 ? x[i] : alpha * x[i].
void vec_leaky_relu(double alpha, const float* x, float* y, int64_t n, DType result);
/// Rounds x[i] in place to the nearest value of `t` (f16 or bf16; nearest even, overflow to
/// inf), so the array holds exactly the values a buffer of `t` would.
void vec_round_to(DType t, float* x, int64_t n);

}  // namespace rlx::cpu
