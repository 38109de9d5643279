// Reference kernels for elementwise ops: unary math, convert, activations, binary arithmetic,
// bitwise and compare ops, select and clamp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "eval.h"

namespace rlx::detail {

// ---- scalar semantics declared in eval.h (also used by the nn, reduce and fused kernels)

// lax.max / lax.min on floats: NaN when either operand is NaN.
double max_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}

double min_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}

// For x < 0, e^x / (1 + e^x), which cannot overflow.
double logistic(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

namespace {

// ---- scalar semantics used only here

// Integer arithmetic runs on int64 through uint64 so overflow wraps instead of being UB;
// Tensor::set_i64 then wraps the result to the element dtype.
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
int64_t wrap_neg(int64_t a) { return wrap_sub(0, a); }

// XLA integer division: truncation toward zero, x / 0 = -1 (all bits set, so 255 for u8) and
// INT_MIN / -1 = INT_MIN. Dividing by -1 as a wrapping negation covers INT_MIN of every dtype.
int64_t int_div(int64_t x, int64_t y) {
  if (y == 0) return -1;
  if (y == -1) return wrap_neg(x);
  return x / y;
}

// XLA integer remainder: sign of the dividend, x rem 0 = x, INT_MIN rem -1 = 0.
int64_t int_rem(int64_t x, int64_t y) {
  if (y == 0) return x;
  if (y == -1) return 0;
  return x % y;
}

// Exponentiation by squaring with wrap-around; a negative exponent gives 0 except for the
// bases 1 (-> 1) and -1 (-> -1 for odd exponents, 1 for even ones), as jnp.power on integers.
int64_t int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? -1 : 1;
    return 0;
  }
  int64_t acc = 1;
  for (; exponent != 0; exponent >>= 1) {
    if (exponent & 1) acc = wrap_mul(acc, base);
    base = wrap_mul(base, base);
  }
  return acc;
}

double sign_float(double x) { return std::isnan(x) || x == 0.0 ? x : std::copysign(1.0, x); }

double softplus(double x) { return std::log1p(std::exp(-std::fabs(x))) + max_nan(x, 0.0); }

// int64 -> double with round-to-odd: exact below 2^53; above, the low bits are truncated and
// the last kept bit is set when any dropped bit was nonzero. Rounding that double once more to
// a format with at most 51 significand bits (f32, f16, bf16) gives exactly the correctly
// rounded value of the integer, so int -> narrow float rounds once as `convert` requires.
double to_double_round_odd(int64_t v) {
  uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int width = std::bit_width(mag);
  if (width <= 53) return static_cast<double>(v);
  int drop = width - 53;
  uint64_t kept = mag >> drop;
  if ((mag & ((uint64_t{1} << drop) - 1)) != 0) kept |= 1;
  double d = std::ldexp(static_cast<double>(kept), drop);
  return v < 0 ? -d : d;
}

// ---- loops

Tensor make_result(const EvalContext& ctx) {
  return Tensor(ctx.result_type().dtype, ctx.result_type().shape);
}

// Float math in double, rounded once to the result dtype; integer math in int64 (wrapping).
template <class FF, class FI>
std::vector<Tensor> unary(const EvalContext& ctx, FF ff, FI fi) {
  const Tensor& x = ctx.operands[0];
  Tensor out = make_result(ctx);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (is_float(x.dtype()))
      out.set_f64(i, ff(x.get_f64(i)));
    else
      out.set_i64(i, fi(x.get_i64(i)));
  }
  return {out};
}

// For the float-only ops (inference rejects every other dtype).
template <class FF>
std::vector<Tensor> unary_float(const EvalContext& ctx, FF ff) {
  const Tensor& x = ctx.operands[0];
  Tensor out = make_result(ctx);
  for (int64_t i = 0; i < out.numel(); ++i) out.set_f64(i, ff(x.get_f64(i)));
  return {out};
}

// Binary op over numpy-broadcast operands of one dtype. Integers are read as int64 (never as
// double), so i64 values beyond 2^53 stay exact.
template <class FF, class FI>
std::vector<Tensor> binary(const EvalContext& ctx, FF ff, FI fi) {
  const Tensor &x = ctx.operands[0], &y = ctx.operands[1];
  Tensor out = make_result(ctx);
  BroadcastIndexer ix(x.shape(), out.shape()), iy(y.shape(), out.shape());
  bool fl = is_float(x.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t a = ix(i), b = iy(i);
    if (fl)
      out.set_f64(i, ff(x.get_f64(a), y.get_f64(b)));
    else
      out.set_i64(i, fi(x.get_i64(a), y.get_i64(b)));
  }
  return {out};
}

// Bitwise/logical ops on integers or bool (bool elements read as 0/1 and stay 0/1).
template <class FI>
std::vector<Tensor> binary_int(const EvalContext& ctx, FI fi) {
  const Tensor &x = ctx.operands[0], &y = ctx.operands[1];
  Tensor out = make_result(ctx);
  BroadcastIndexer ix(x.shape(), out.shape()), iy(y.shape(), out.shape());
  for (int64_t i = 0; i < out.numel(); ++i) out.set_i64(i, fi(x.get_i64(ix(i)), y.get_i64(iy(i))));
  return {out};
}

// Compare ops with a generic predicate applied to doubles (floats) or int64 (integers, bool).
template <class Cmp>
std::vector<Tensor> compare(const EvalContext& ctx, Cmp cmp) {
  return binary(
      ctx, [cmp](double a, double b) { return cmp(a, b) ? 1.0 : 0.0; },
      [cmp](int64_t a, int64_t b) -> int64_t { return cmp(a, b) ? 1 : 0; });
}

std::vector<Tensor> eval_not(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  bool logical = is_bool(x.dtype());
  Tensor out = make_result(ctx);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t v = x.get_i64(i);
    out.set_i64(i, logical ? (v == 0) : ~v);
  }
  return {out};
}

// Float sources go through set_f64 (saturating to ints, NaN -> 0, RNE to narrow floats);
// integer and bool sources through set_i64 (wrapping), except that integers bound for a
// narrow float are pre-rounded to odd so the final rounding is the only one. (XLA on CPU
// converts i64 -> bf16 through f32 and can differ here in the last bit for |x| > 2^24.)
std::vector<Tensor> eval_convert(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  Tensor out = make_result(ctx);
  DType to = out.dtype();
  bool narrow_float = is_float(to) && to != DType::f64;
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (is_float(x.dtype()))
      out.set_f64(i, x.get_f64(i));
    else if (narrow_float)
      out.set_f64(i, to_double_round_odd(x.get_i64(i)));
    else
      out.set_i64(i, x.get_i64(i));
  }
  return {out};
}

std::vector<Tensor> eval_leaky_relu(const EvalContext& ctx) {
  double alpha = ctx.attrs().get_float("alpha");
  return unary_float(ctx, [alpha](double x) { return x >= 0 ? x : alpha * x; });
}

// Copies elements bit for bit, so NaN payloads and -0 pass through unchanged.
std::vector<Tensor> eval_select(const EvalContext& ctx) {
  const Tensor &pred = ctx.operands[0], &on_true = ctx.operands[1], &on_false = ctx.operands[2];
  Tensor out = make_result(ctx);
  BroadcastIndexer ip(pred.shape(), out.shape()), it(on_true.shape(), out.shape()),
      iff(on_false.shape(), out.shape());
  auto size = static_cast<size_t>(dtype_size(out.dtype()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    bool take_true = pred.get_i64(ip(i)) != 0;
    const Tensor& src = take_true ? on_true : on_false;
    int64_t j = take_true ? it(i) : iff(i);
    std::memcpy(out.data() + static_cast<size_t>(i) * size,
                src.data() + static_cast<size_t>(j) * size, size);
  }
  return {out};
}

// lax.clamp(lo, x, hi) = min(max(x, lo), hi), NaN-propagating for floats.
std::vector<Tensor> eval_clamp(const EvalContext& ctx) {
  const Tensor &lo = ctx.operands[0], &x = ctx.operands[1], &hi = ctx.operands[2];
  Tensor out = make_result(ctx);
  BroadcastIndexer il(lo.shape(), out.shape()), ix(x.shape(), out.shape()),
      ih(hi.shape(), out.shape());
  bool fl = is_float(out.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (fl)
      out.set_f64(i, min_nan(max_nan(x.get_f64(ix(i)), lo.get_f64(il(i))), hi.get_f64(ih(i))));
    else
      out.set_i64(i, std::min(std::max(x.get_i64(ix(i)), lo.get_i64(il(i))), hi.get_i64(ih(i))));
  }
  return {out};
}

}  // namespace

void register_eval_elementwise() {
  using C = const EvalContext&;
  // ---- unary
  set_eval(OpKind::Neg, [](C c) {
    return unary(
        c, [](double x) { return -x; }, wrap_neg);
  });
  set_eval(OpKind::Abs, [](C c) {
    return unary(
        c, [](double x) { return std::fabs(x); },
        [](int64_t x) { return x < 0 ? wrap_neg(x) : x; });
  });
  set_eval(OpKind::Sign, [](C c) {
    return unary(c, sign_float, [](int64_t x) -> int64_t { return (x > 0) - (x < 0); });
  });
  set_eval(OpKind::Exp, [](C c) { return unary_float(c, [](double x) { return std::exp(x); }); });
  set_eval(OpKind::Expm1,
           [](C c) { return unary_float(c, [](double x) { return std::expm1(x); }); });
  set_eval(OpKind::Log, [](C c) { return unary_float(c, [](double x) { return std::log(x); }); });
  set_eval(OpKind::Log1p,
           [](C c) { return unary_float(c, [](double x) { return std::log1p(x); }); });
  set_eval(OpKind::Sqrt, [](C c) { return unary_float(c, [](double x) { return std::sqrt(x); }); });
  set_eval(OpKind::Rsqrt,
           [](C c) { return unary_float(c, [](double x) { return 1.0 / std::sqrt(x); }); });
  set_eval(OpKind::Sin, [](C c) { return unary_float(c, [](double x) { return std::sin(x); }); });
  set_eval(OpKind::Cos, [](C c) { return unary_float(c, [](double x) { return std::cos(x); }); });
  set_eval(OpKind::Tan, [](C c) { return unary_float(c, [](double x) { return std::tan(x); }); });
  set_eval(OpKind::Tanh, [](C c) { return unary_float(c, [](double x) { return std::tanh(x); }); });
  set_eval(OpKind::Atan, [](C c) { return unary_float(c, [](double x) { return std::atan(x); }); });
  set_eval(OpKind::Logistic, [](C c) { return unary_float(c, logistic); });
  set_eval(OpKind::Erf, [](C c) { return unary_float(c, [](double x) { return std::erf(x); }); });
  set_eval(OpKind::Floor,
           [](C c) { return unary_float(c, [](double x) { return std::floor(x); }); });
  set_eval(OpKind::Ceil, [](C c) { return unary_float(c, [](double x) { return std::ceil(x); }); });
  // std::nearbyint in the default rounding mode rounds half to even.
  set_eval(OpKind::Round,
           [](C c) { return unary_float(c, [](double x) { return std::nearbyint(x); }); });
  set_eval(OpKind::Not, eval_not);
  set_eval(OpKind::Convert, eval_convert);
  // stop_gradient only matters to autodiff; its value is the operand, copied bit for bit.
  set_eval(OpKind::StopGradient, [](C c) { return std::vector<Tensor>{c.operands[0].clone()}; });

  // ---- activations
  set_eval(OpKind::Relu, [](C c) {
    return unary(
        c, [](double x) { return max_nan(x, 0.0); },
        [](int64_t x) { return std::max<int64_t>(x, 0); });
  });
  set_eval(OpKind::Gelu, [](C c) { return unary_float(c, gelu); });
  set_eval(OpKind::GeluTanh, [](C c) { return unary_float(c, gelu_tanh); });
  set_eval(OpKind::Silu,
           [](C c) { return unary_float(c, [](double x) { return x * logistic(x); }); });
  set_eval(OpKind::Softplus, [](C c) { return unary_float(c, softplus); });
  set_eval(OpKind::LeakyRelu, eval_leaky_relu);

  // ---- binary arithmetic
  set_eval(OpKind::Add, [](C c) {
    return binary(
        c, [](double a, double b) { return a + b; }, wrap_add);
  });
  set_eval(OpKind::Sub, [](C c) {
    return binary(
        c, [](double a, double b) { return a - b; }, wrap_sub);
  });
  set_eval(OpKind::Mul, [](C c) {
    return binary(
        c, [](double a, double b) { return a * b; }, wrap_mul);
  });
  set_eval(OpKind::Div, [](C c) {
    return binary(
        c, [](double a, double b) { return a / b; }, int_div);
  });
  set_eval(OpKind::Pow, [](C c) {
    return binary(
        c, [](double a, double b) { return std::pow(a, b); }, int_pow);
  });
  set_eval(OpKind::Rem, [](C c) {
    return binary(
        c, [](double a, double b) { return std::fmod(a, b); }, int_rem);
  });
  set_eval(OpKind::Max, [](C c) {
    return binary(c, max_nan, [](int64_t a, int64_t b) { return std::max(a, b); });
  });
  set_eval(OpKind::Min, [](C c) {
    return binary(c, min_nan, [](int64_t a, int64_t b) { return std::min(a, b); });
  });

  // ---- bitwise / logical (bool is 0/1, so the bitwise forms are the logical ones)
  set_eval(OpKind::And,
           [](C c) { return binary_int(c, [](int64_t a, int64_t b) { return a & b; }); });
  set_eval(OpKind::Or,
           [](C c) { return binary_int(c, [](int64_t a, int64_t b) { return a | b; }); });
  set_eval(OpKind::Xor,
           [](C c) { return binary_int(c, [](int64_t a, int64_t b) { return a ^ b; }); });

  // ---- compare (IEEE: every comparison with NaN is false except ne)
  set_eval(OpKind::Eq, [](C c) { return compare(c, [](auto a, auto b) { return a == b; }); });
  set_eval(OpKind::Ne, [](C c) { return compare(c, [](auto a, auto b) { return a != b; }); });
  set_eval(OpKind::Lt, [](C c) { return compare(c, [](auto a, auto b) { return a < b; }); });
  set_eval(OpKind::Le, [](C c) { return compare(c, [](auto a, auto b) { return a <= b; }); });
  set_eval(OpKind::Gt, [](C c) { return compare(c, [](auto a, auto b) { return a > b; }); });
  set_eval(OpKind::Ge, [](C c) { return compare(c, [](auto a, auto b) { return a >= b; }); });

  set_eval(OpKind::Select, eval_select);
  set_eval(OpKind::Clamp, eval_clamp);
}

}  // namespace rlx::detail
