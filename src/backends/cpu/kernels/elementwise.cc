// Native CPU kernels of the elementwise family: every kElementwise op of ops.def (unary math,
// convert, activations, binary arithmetic / bitwise / compare with numpy broadcasting, select,
// clamp) for every dtype it accepts, and elementwise_region.
//
// A node compiles to a Program: its operands, a list of Steps over block buffers and the
// stores of its results. A single op is a one-step Program; a region has one Step per live body
// node, so its whole body runs on blocks of kBlock elements held in per-thread L1-sized buffers
// and the region is one pass over memory. Broadcast operands are read in the loop through
// their strides (BroadcastLayout), never materialized.
//
// Within a block a value is held in a computation type (Repr): f32 for f32 / f16 / bf16 (a
// 16-bit value is rounded back to its dtype after each step that may leave its value set, as
// the reference rounds each node's result), f64, or the integer / bool storage type. f32 math is
// SIMD (vec_math.h); f64, integer and bool steps are scalar loops with exactly the reference
// evaluator's formulas (src/ir/eval/elementwise.cc), so they match it bit for bit.
//
// Accuracy against the reference evaluator (which computes in double and rounds once): bit-equal
// for every op on f64, integers and bool, for convert, and for add / sub / mul / div / pow / rem
// / max / min / compare / select / clamp / neg / abs / sign / floor / ceil / round / relu / sqrt /
// rsqrt / leaky_relu on f32, f16 and bf16 (IEEE f32 arithmetic is correctly rounded, and one more
// rounding to 16 bits of an exact-op f32 result equals rounding the exact value, since f32 has
// more than 2p + 2 bits for p = 11 and 8; pow, rsqrt and leaky_relu compute in f64). The
// transcendentals and activations are within vec_math.h's ulp bounds on f32, and within one
// ulp of the dtype on f16 / bf16.
//
// Coverage: every op x dtype the IR accepts runs natively. A node falls back to the reference
// kernel only when a region's outputs differ in shape (no single iteration space) or its
// broadcast layout needs more than BroadcastLayout::kMaxRank collapsed dims.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <optional>
#include <type_traits>
#include <vector>

#include "../kernel.h"
#include "broadcast.h"
#include "half.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/threading.h"
#include "vec_math.h"

namespace rlx::cpu {
namespace {

// Elements per block. A buffer holds a block of the widest Repr (8 bytes), so 4 KiB: the few
// live buffers of a typical body stay in a 32 KiB L1 data cache.
constexpr int64_t kBlock = 512;
constexpr size_t kBufferBytes = kBlock * sizeof(double);
constexpr int64_t kGrain = 16384;  // elements per parallel chunk, at least

// ---- computation types

enum class Repr : uint8_t { kF32, kF64, kI8, kU8, kI32, kI64, kBool };

Repr repr_of(DType t) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      return Repr::kF32;
    case DType::f64:
      return Repr::kF64;
    case DType::i8:
      return Repr::kI8;
    case DType::u8:
      return Repr::kU8;
    case DType::i32:
      return Repr::kI32;
    case DType::i64:
      return Repr::kI64;
    case DType::bool_:
      return Repr::kBool;
  }
  return Repr::kF32;
}

size_t repr_size(Repr r) {
  switch (r) {
    case Repr::kF32:
    case Repr::kI32:
      return 4;
    case Repr::kF64:
    case Repr::kI64:
      return 8;
    default:
      return 1;
  }
}

// f16 and bf16 are widened on load and rounded on store; every other dtype is its own Repr.
bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }
// Operands of these dtypes are converted into a buffer on load, never read in place: 16-bit
// floats are widened, bool bytes normalized to 0 / 1 (any nonzero byte is true, as the
// reference's Tensor::get_i64 reads it).
bool converts_on_load(DType t) { return is_half(t) || t == DType::bool_; }

// Calls fn(T{}) with the C++ type of Repr r (bool is uint8_t holding 0 / 1).
template <class F>
auto visit_repr(Repr r, F&& fn) {
  switch (r) {
    case Repr::kF32:
      return fn(float{});
    case Repr::kF64:
      return fn(double{});
    case Repr::kI8:
      return fn(int8_t{});
    case Repr::kU8:
    case Repr::kBool:
      return fn(uint8_t{});
    case Repr::kI32:
      return fn(int32_t{});
    case Repr::kI64:
      return fn(int64_t{});
  }
  return fn(float{});
}

// ---- steps

struct Step;
/// Computes n elements of a step: in[i] are its operands' block buffers, out its result's.
using StepFn = void (*)(const Step& s, const void* const* in, void* out, int64_t n);

struct Step {
  StepFn fn = nullptr;
  int32_t in[3] = {-1, -1, -1};  // slots of the operands
  int32_t out = -1;              // slot of the result
  uint8_t code = 0;              // VecFn / VecBinary / VecCompare of the f32 steps
  double alpha = 0;              // leaky_relu
  DType src = DType::f32;        // dtype of operand 0 (convert)
  DType dst = DType::f32;        // dtype of the result
  bool round = false;            // round the f32 result to dst (f16 / bf16) afterwards
};

template <class T>
const T* arg(const void* const* in, int i) {
  return static_cast<const T*>(in[i]);
}

// f32 steps: SIMD (vec_math.h).
void f32_apply(const Step& s, const void* const* in, void* out, int64_t n) {
  vec_apply(static_cast<VecFn>(s.code), arg<float>(in, 0), static_cast<float*>(out), n);
}
void f32_binary(const Step& s, const void* const* in, void* out, int64_t n) {
  vec_binary(static_cast<VecBinary>(s.code), arg<float>(in, 0), arg<float>(in, 1),
             static_cast<float*>(out), n);
}
void f32_compare(const Step& s, const void* const* in, void* out, int64_t n) {
  vec_compare(static_cast<VecCompare>(s.code), arg<float>(in, 0), arg<float>(in, 1),
              static_cast<uint8_t*>(out), n);
}
void f32_select(const Step&, const void* const* in, void* out, int64_t n) {
  vec_select(arg<uint8_t>(in, 0), arg<float>(in, 1), arg<float>(in, 2), static_cast<float*>(out),
             n);
}
void f32_clamp(const Step&, const void* const* in, void* out, int64_t n) {
  vec_clamp(arg<float>(in, 0), arg<float>(in, 1), arg<float>(in, 2), static_cast<float*>(out), n);
}
void f32_leaky_relu(const Step& s, const void* const* in, void* out, int64_t n) {
  vec_leaky_relu(s.alpha, arg<float>(in, 0), static_cast<float*>(out), n, s.dst);
}
void f32_rsqrt(const Step& s, const void* const* in, void* out, int64_t n) {
  vec_rsqrt(arg<float>(in, 0), static_cast<float*>(out), n, s.dst);
}

// A double result rounded once to the f32 / f16 / bf16 value set (the reference's set_f64).
float round_from_double(double v, DType t) {
  switch (t) {
    case DType::f16:
      return to_f32(f16_from_double(v));
    case DType::bf16:
      return to_f32(bf16_from_double(v));
    default:
      return static_cast<float>(v);
  }
}

// pow in double (C pow), rounded once: exactly the reference. rem is fmod, exact in any format.
void f32_pow(const Step& s, const void* const* in, void* out, int64_t n) {
  const float *a = arg<float>(in, 0), *b = arg<float>(in, 1);
  auto* y = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i)
    y[i] = round_from_double(std::pow(static_cast<double>(a[i]), static_cast<double>(b[i])), s.dst);
}
void f32_rem(const Step&, const void* const* in, void* out, int64_t n) {
  const float *a = arg<float>(in, 0), *b = arg<float>(in, 1);
  auto* y = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = std::fmod(a[i], b[i]);
}

// ---- scalar semantics of the reference evaluator (src/ir/eval/elementwise.cc), per C++ type

double max_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}
double min_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}
double logistic(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

// f64 unary math, one function per op (the reference's lambdas).
double f_neg(double x) { return -x; }
double f_abs(double x) { return std::fabs(x); }
double f_sign(double x) { return std::isnan(x) || x == 0.0 ? x : std::copysign(1.0, x); }
double f_exp(double x) { return std::exp(x); }
double f_expm1(double x) { return std::expm1(x); }
double f_log(double x) { return std::log(x); }
double f_log1p(double x) { return std::log1p(x); }
double f_sqrt(double x) { return std::sqrt(x); }
double f_rsqrt(double x) { return 1.0 / std::sqrt(x); }
double f_sin(double x) { return std::sin(x); }
double f_cos(double x) { return std::cos(x); }
double f_tan(double x) { return std::tan(x); }
double f_tanh(double x) { return std::tanh(x); }
double f_atan(double x) { return std::atan(x); }
double f_erf(double x) { return std::erf(x); }
double f_floor(double x) { return std::floor(x); }
double f_ceil(double x) { return std::ceil(x); }
double f_round(double x) { return std::nearbyint(x); }  // ties to even in the default mode
double f_relu(double x) { return max_nan(x, 0.0); }
double f_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }
double f_gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double f_silu(double x) { return x * logistic(x); }
double f_softplus(double x) { return std::log1p(std::exp(-std::fabs(x))) + max_nan(x, 0.0); }

template <double (*F)(double)>
void f64_unary(const Step&, const void* const* in, void* out, int64_t n) {
  const double* x = arg<double>(in, 0);
  auto* y = static_cast<double*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);
}

void f64_leaky_relu(const Step& s, const void* const* in, void* out, int64_t n) {
  const double* x = arg<double>(in, 0);
  auto* y = static_cast<double*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0 ? x[i] : s.alpha * x[i];
}

// Integer arithmetic wraps (computed in the unsigned type); bool is 0 / 1 in a uint8_t.
template <class T>
T wrap(uint64_t v) {
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
}

// XLA integer pow by squaring with wrap-around; negative exponents give 0 except for bases 1
// and -1 (the reference's int_pow, whose int64 result wraps to T).
int64_t int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? -1 : 1;
    return 0;
  }
  uint64_t acc = 1, b = static_cast<uint64_t>(base);
  for (; exponent != 0; exponent >>= 1) {
    if (exponent & 1) acc *= b;
    b *= b;
  }
  return static_cast<int64_t>(acc);
}

// Unary ops on a numeric or bool type T (double or integer; the f32 forms are SIMD).
enum class U1 : uint8_t { kNeg, kAbs, kSign, kRelu, kBitNot, kLogicalNot };

template <class T, U1 kOp>
void int_unary(const Step&, const void* const* in, void* out, int64_t n) {
  const T* x = arg<T>(in, 0);
  T* y = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) {
    T v = x[i];
    if constexpr (kOp == U1::kNeg) y[i] = wrap<T>(0 - static_cast<uint64_t>(v));
    if constexpr (kOp == U1::kAbs)
      y[i] = v < 0 ? wrap<T>(0 - static_cast<uint64_t>(v)) : v;  // abs(INT_MIN) wraps
    if constexpr (kOp == U1::kSign) y[i] = static_cast<T>((v > 0) - (v < 0));
    if constexpr (kOp == U1::kRelu) y[i] = std::max<T>(v, 0);
    if constexpr (kOp == U1::kBitNot) y[i] = static_cast<T>(~v);
    if constexpr (kOp == U1::kLogicalNot) y[i] = v == 0;
  }
}

// Binary ops; double follows the reference's float formulas, integers its int64 ones wrapped to
// T (wrapping commutes with +, -, *, so computing in T's unsigned type is the same).
enum class B2 : uint8_t { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kRem, kAnd, kOr, kXor };

template <class T, B2 kOp>
T binary_op(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (kOp == B2::kAdd) return a + b;
    if constexpr (kOp == B2::kSub) return a - b;
    if constexpr (kOp == B2::kMul) return a * b;
    if constexpr (kOp == B2::kDiv) return a / b;
    if constexpr (kOp == B2::kPow) return std::pow(a, b);
    if constexpr (kOp == B2::kMax) return max_nan(a, b);
    if constexpr (kOp == B2::kMin) return min_nan(a, b);
    if constexpr (kOp == B2::kRem) return std::fmod(a, b);
    return a;
  } else {
    const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    if constexpr (kOp == B2::kAdd) return wrap<T>(ua + ub);
    if constexpr (kOp == B2::kSub) return wrap<T>(ua - ub);
    if constexpr (kOp == B2::kMul) return wrap<T>(ua * ub);
    if constexpr (kOp == B2::kDiv) {  // x / 0 = -1 (all bits set), x / -1 wraps (INT_MIN)
      if (b == 0) return static_cast<T>(-1);
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return wrap<T>(0 - ua);
      return static_cast<T>(a / b);
    }
    if constexpr (kOp == B2::kPow) return wrap<T>(static_cast<uint64_t>(int_pow(a, b)));
    if constexpr (kOp == B2::kMax) return std::max(a, b);
    if constexpr (kOp == B2::kMin) return std::min(a, b);
    if constexpr (kOp == B2::kRem) {  // x rem 0 = x, x rem -1 = 0 (no INT_MIN % -1 trap)
      if (b == 0) return a;
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return 0;
      return static_cast<T>(a % b);
    }
    if constexpr (kOp == B2::kAnd) return static_cast<T>(a & b);
    if constexpr (kOp == B2::kOr) return static_cast<T>(a | b);
    if constexpr (kOp == B2::kXor) return static_cast<T>(a ^ b);
    return a;
  }
}

template <class T, B2 kOp>
void scalar_binary(const Step&, const void* const* in, void* out, int64_t n) {
  const T *a = arg<T>(in, 0), *b = arg<T>(in, 1);
  T* y = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = binary_op<T, kOp>(a[i], b[i]);
}

template <class T>
void scalar_compare(const Step& s, const void* const* in, void* out, int64_t n) {
  const T *a = arg<T>(in, 0), *b = arg<T>(in, 1);
  auto* y = static_cast<uint8_t*>(out);
  switch (static_cast<VecCompare>(s.code)) {
    case VecCompare::kEq:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] == b[i];
      return;
    case VecCompare::kNe:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] != b[i];
      return;
    case VecCompare::kLt:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] < b[i];
      return;
    case VecCompare::kLe:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] <= b[i];
      return;
    case VecCompare::kGt:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] > b[i];
      return;
    case VecCompare::kGe:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] >= b[i];
      return;
  }
}

template <class T>
void scalar_select(const Step&, const void* const* in, void* out, int64_t n) {
  const uint8_t* p = arg<uint8_t>(in, 0);
  const T *a = arg<T>(in, 1), *b = arg<T>(in, 2);
  T* y = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = p[i] ? a[i] : b[i];
}

template <class T>
void scalar_clamp(const Step&, const void* const* in, void* out, int64_t n) {
  const T *lo = arg<T>(in, 0), *x = arg<T>(in, 1), *hi = arg<T>(in, 2);
  T* y = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<T>)
      y[i] = min_nan(max_nan(x[i], lo[i]), hi[i]);
    else
      y[i] = std::min(std::max(x[i], lo[i]), hi[i]);
  }
}

// ---- convert (the reference's eval_convert / Tensor::set_f64 / set_i64 rules)

// Float -> integer: truncation toward zero, saturating at D's range, NaN -> 0.
template <class D>
D saturate(double v) {
  if (std::isnan(v)) return 0;
  if constexpr (std::is_same_v<D, int64_t>) {
    if (v >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
    if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(v);
  } else {
    constexpr auto lo = static_cast<double>(std::numeric_limits<D>::min());
    constexpr auto hi = static_cast<double>(std::numeric_limits<D>::max());
    if (v <= lo) return std::numeric_limits<D>::min();
    if (v >= hi) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  }
}

// int64 -> double rounded to odd: exact below 2^53, else the last kept bit is sticky, so one
// more rounding to f16 / bf16 is the correctly rounded value (the reference's
// to_double_round_odd).
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

// y = static_cast<D>(x): float -> wider float, f64 -> f32 (nearest even), integer -> integer
// (wraps), integer -> f32 / f64 (correctly rounded by the hardware conversion).
template <class S, class D>
void cvt_cast(const Step&, const void* const* in, void* out, int64_t n) {
  const S* x = arg<S>(in, 0);
  D* y = static_cast<D*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<D>(x[i]);
}

template <class S>
void cvt_to_bool(const Step&, const void* const* in, void* out, int64_t n) {
  const S* x = arg<S>(in, 0);
  auto* y = static_cast<uint8_t*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] != 0;  // NaN != 0 is true
}

template <class S, class D>
void cvt_saturate(const Step&, const void* const* in, void* out, int64_t n) {
  const S* x = arg<S>(in, 0);
  D* y = static_cast<D*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = saturate<D>(static_cast<double>(x[i]));
}

// f64 or integer -> f16 / bf16 (held as f32), rounded once from the exact value.
template <class S>
void cvt_to_half(const Step& s, const void* const* in, void* out, int64_t n) {
  const S* x = arg<S>(in, 0);
  auto* y = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if constexpr (std::is_same_v<S, int64_t>)
      v = to_double_round_odd(x[i]);
    else
      v = static_cast<double>(x[i]);
    y[i] = round_from_double(v, s.dst);
  }
}

// f32 / f16 / bf16 -> f32 / f16 / bf16: the f32 value, rounded by the step when narrower.
void cvt_f32_copy(const Step&, const void* const* in, void* out, int64_t n) {
  if (in[0] != out) std::memcpy(out, in[0], static_cast<size_t>(n) * sizeof(float));
}

// The convert step from s.src to s.dst, or nullptr.
StepFn convert_fn(DType src, DType dst) {
  Repr rs = repr_of(src), rd = repr_of(dst);
  bool src_float = is_float(src), dst_float = is_float(dst);
  if (rs == Repr::kF32 && rd == Repr::kF32) return cvt_f32_copy;
  return visit_repr(rs, [&](auto s) -> StepFn {
    using S = decltype(s);
    if (dst == DType::bool_) return cvt_to_bool<S>;
    if (is_half(dst)) return cvt_to_half<S>;
    return visit_repr(rd, [&](auto d) -> StepFn {
      using D = decltype(d);
      if (src_float && !dst_float) return cvt_saturate<S, D>;
      return cvt_cast<S, D>;
    });
  });
}

// ---- choosing a step for a node

std::optional<VecFn> vec_fn(OpKind op) {
  switch (op) {
    case OpKind::Neg:
      return VecFn::kNeg;
    case OpKind::Abs:
      return VecFn::kAbs;
    case OpKind::Sign:
      return VecFn::kSign;
    case OpKind::Floor:
      return VecFn::kFloor;
    case OpKind::Ceil:
      return VecFn::kCeil;
    case OpKind::Round:
      return VecFn::kRound;
    case OpKind::Relu:
      return VecFn::kRelu;
    case OpKind::Sqrt:
      return VecFn::kSqrt;
    case OpKind::Exp:
      return VecFn::kExp;
    case OpKind::Expm1:
      return VecFn::kExpm1;
    case OpKind::Log:
      return VecFn::kLog;
    case OpKind::Log1p:
      return VecFn::kLog1p;
    case OpKind::Sin:
      return VecFn::kSin;
    case OpKind::Cos:
      return VecFn::kCos;
    case OpKind::Tan:
      return VecFn::kTan;
    case OpKind::Tanh:
      return VecFn::kTanh;
    case OpKind::Atan:
      return VecFn::kAtan;
    case OpKind::Logistic:
      return VecFn::kLogistic;
    case OpKind::Erf:
      return VecFn::kErf;
    case OpKind::Gelu:
      return VecFn::kGelu;
    case OpKind::GeluTanh:
      return VecFn::kGeluTanh;
    case OpKind::Silu:
      return VecFn::kSilu;
    case OpKind::Softplus:
      return VecFn::kSoftplus;
    default:
      return std::nullopt;
  }
}

StepFn f64_unary_fn(OpKind op) {
  switch (op) {
    case OpKind::Neg:
      return f64_unary<f_neg>;
    case OpKind::Abs:
      return f64_unary<f_abs>;
    case OpKind::Sign:
      return f64_unary<f_sign>;
    case OpKind::Floor:
      return f64_unary<f_floor>;
    case OpKind::Ceil:
      return f64_unary<f_ceil>;
    case OpKind::Round:
      return f64_unary<f_round>;
    case OpKind::Relu:
      return f64_unary<f_relu>;
    case OpKind::Sqrt:
      return f64_unary<f_sqrt>;
    case OpKind::Rsqrt:
      return f64_unary<f_rsqrt>;
    case OpKind::Exp:
      return f64_unary<f_exp>;
    case OpKind::Expm1:
      return f64_unary<f_expm1>;
    case OpKind::Log:
      return f64_unary<f_log>;
    case OpKind::Log1p:
      return f64_unary<f_log1p>;
    case OpKind::Sin:
      return f64_unary<f_sin>;
    case OpKind::Cos:
      return f64_unary<f_cos>;
    case OpKind::Tan:
      return f64_unary<f_tan>;
    case OpKind::Tanh:
      return f64_unary<f_tanh>;
    case OpKind::Atan:
      return f64_unary<f_atan>;
    case OpKind::Logistic:
      return f64_unary<logistic>;
    case OpKind::Erf:
      return f64_unary<f_erf>;
    case OpKind::Gelu:
      return f64_unary<f_gelu>;
    case OpKind::GeluTanh:
      return f64_unary<f_gelu_tanh>;
    case OpKind::Silu:
      return f64_unary<f_silu>;
    case OpKind::Softplus:
      return f64_unary<f_softplus>;
    case OpKind::LeakyRelu:
      return f64_leaky_relu;
    default:
      return nullptr;
  }
}

template <class T>
StepFn int_unary_fn(OpKind op, bool is_bool) {
  if constexpr (std::is_floating_point_v<T>) {
    return nullptr;  // floats have the SIMD (f32) and f64 forms
  } else {
    switch (op) {
      case OpKind::Neg:
        return int_unary<T, U1::kNeg>;
      case OpKind::Abs:
        return int_unary<T, U1::kAbs>;
      case OpKind::Sign:
        return int_unary<T, U1::kSign>;
      case OpKind::Relu:
        return int_unary<T, U1::kRelu>;
      case OpKind::Not:
        return is_bool ? int_unary<T, U1::kLogicalNot> : int_unary<T, U1::kBitNot>;
      default:
        return nullptr;
    }
  }
}

std::optional<B2> binary_kind(OpKind op) {
  switch (op) {
    case OpKind::Add:
      return B2::kAdd;
    case OpKind::Sub:
      return B2::kSub;
    case OpKind::Mul:
      return B2::kMul;
    case OpKind::Div:
      return B2::kDiv;
    case OpKind::Pow:
      return B2::kPow;
    case OpKind::Max:
      return B2::kMax;
    case OpKind::Min:
      return B2::kMin;
    case OpKind::Rem:
      return B2::kRem;
    case OpKind::And:
      return B2::kAnd;
    case OpKind::Or:
      return B2::kOr;
    case OpKind::Xor:
      return B2::kXor;
    default:
      return std::nullopt;
  }
}

template <class T>
StepFn scalar_binary_fn(B2 op) {
  switch (op) {
    case B2::kAdd:
      return scalar_binary<T, B2::kAdd>;
    case B2::kSub:
      return scalar_binary<T, B2::kSub>;
    case B2::kMul:
      return scalar_binary<T, B2::kMul>;
    case B2::kDiv:
      return scalar_binary<T, B2::kDiv>;
    case B2::kPow:
      return scalar_binary<T, B2::kPow>;
    case B2::kMax:
      return scalar_binary<T, B2::kMax>;
    case B2::kMin:
      return scalar_binary<T, B2::kMin>;
    case B2::kRem:
      return scalar_binary<T, B2::kRem>;
    case B2::kAnd:
    case B2::kOr:
    case B2::kXor:
      if constexpr (std::is_floating_point_v<T>) {
        return nullptr;  // bitwise ops take integers and bool only
      } else {
        return op == B2::kAnd  ? scalar_binary<T, B2::kAnd>
               : op == B2::kOr ? scalar_binary<T, B2::kOr>
                               : scalar_binary<T, B2::kXor>;
      }
  }
  return nullptr;
}

std::optional<VecBinary> vec_binary_kind(OpKind op) {
  switch (op) {
    case OpKind::Add:
      return VecBinary::kAdd;
    case OpKind::Sub:
      return VecBinary::kSub;
    case OpKind::Mul:
      return VecBinary::kMul;
    case OpKind::Div:
      return VecBinary::kDiv;
    case OpKind::Max:
      return VecBinary::kMax;
    case OpKind::Min:
      return VecBinary::kMin;
    default:
      return std::nullopt;
  }
}

std::optional<VecCompare> compare_kind(OpKind op) {
  switch (op) {
    case OpKind::Eq:
      return VecCompare::kEq;
    case OpKind::Ne:
      return VecCompare::kNe;
    case OpKind::Lt:
      return VecCompare::kLt;
    case OpKind::Le:
      return VecCompare::kLe;
    case OpKind::Gt:
      return VecCompare::kGt;
    case OpKind::Ge:
      return VecCompare::kGe;
    default:
      return std::nullopt;
  }
}

// Ops whose f32 result is always a value of the operands' 16-bit dtype (sign flips, integers,
// picks among operands), so it needs no rounding back to f16 / bf16.
bool keeps_value_set(OpKind op) {
  switch (op) {
    case OpKind::Neg:
    case OpKind::Abs:
    case OpKind::Sign:
    case OpKind::Floor:
    case OpKind::Ceil:
    case OpKind::Round:
    case OpKind::Relu:
    case OpKind::Max:
    case OpKind::Min:
    case OpKind::Rem:
    case OpKind::Pow:  // rounded from double by the step itself
    case OpKind::Select:
    case OpKind::Clamp:
      return true;
    default:
      return false;
  }
}

// Fills s.fn / code / alpha for `op` on operands of dtypes `in` with result dtype `out`, or
// returns false when there is no native step for the combination.
bool pick_step(OpKind op, const std::vector<DType>& in, DType out, const AttrMap& attrs, Step& s) {
  s.dst = out;
  s.src = in.empty() ? out : in[0];
  const Repr r = repr_of(s.src);
  if (op == OpKind::Convert) {
    s.fn = convert_fn(s.src, out);
    s.round = s.fn == cvt_f32_copy && is_half(out) && s.src != out;
    return s.fn != nullptr;
  }
  if (op == OpKind::LeakyRelu) {
    s.alpha = attrs.get_float("alpha");
    s.fn = r == Repr::kF32 ? f32_leaky_relu : r == Repr::kF64 ? f64_leaky_relu : nullptr;
  } else if (op == OpKind::Rsqrt) {
    s.fn = r == Repr::kF32 ? f32_rsqrt : r == Repr::kF64 ? f64_unary<f_rsqrt> : nullptr;
  } else if (auto f = vec_fn(op); f && in.size() == 1) {
    if (r == Repr::kF32) {
      s.fn = f32_apply;
      s.code = static_cast<uint8_t>(*f);
    } else if (r == Repr::kF64) {
      s.fn = f64_unary_fn(op);
    } else {
      s.fn = visit_repr(r, [&](auto t) { return int_unary_fn<decltype(t)>(op, false); });
    }
  } else if (op == OpKind::Not) {
    s.fn = visit_repr(r, [&](auto t) { return int_unary_fn<decltype(t)>(op, r == Repr::kBool); });
  } else if (auto b = binary_kind(op)) {
    if (r == Repr::kF32) {
      if (op == OpKind::Pow) {
        s.fn = f32_pow;
      } else if (op == OpKind::Rem) {
        s.fn = f32_rem;
      } else if (auto v = vec_binary_kind(op)) {
        s.fn = f32_binary;
        s.code = static_cast<uint8_t>(*v);
      }
    } else {
      s.fn = visit_repr(r, [&](auto t) { return scalar_binary_fn<decltype(t)>(*b); });
    }
  } else if (auto c = compare_kind(op)) {
    s.code = static_cast<uint8_t>(*c);
    s.fn = r == Repr::kF32
               ? f32_compare
               : visit_repr(r, [](auto t) -> StepFn { return scalar_compare<decltype(t)>; });
  } else if (op == OpKind::Select) {
    s.src = in[1];
    s.fn = repr_of(in[1]) == Repr::kF32 ? f32_select
                                        : visit_repr(repr_of(in[1]), [](auto t) -> StepFn {
                                            return scalar_select<decltype(t)>;
                                          });
  } else if (op == OpKind::Clamp) {
    s.fn = r == Repr::kF32
               ? f32_clamp
               : visit_repr(r, [](auto t) -> StepFn { return scalar_clamp<decltype(t)>; });
  }
  s.round = s.fn != nullptr && is_half(out) && !keeps_value_set(op);
  return s.fn != nullptr;
}

// ---- programs

// How a flat block of the result reads an operand: the same flat range, one element, or runs
// walked through its broadcast strides.
enum class Access : uint8_t { kDense, kSplat, kWalk };

struct Operand {
  DType dtype = DType::f32;
  Access access = Access::kWalk;
  int32_t input = -1;                      // index into KernelIO::in; -1 for a constant
  std::shared_ptr<const Tensor> constant;  // a body constant, dense
  int32_t slot = -1;
};

struct Output {
  int32_t slot = -1;
  DType dtype = DType::f32;
  bool direct = false;  // the last step writes it in place (f32 / f64 / integer / bool result)
};

struct Program {
  BroadcastLayout layout;
  std::vector<Operand> operands;
  std::vector<Step> steps;
  std::vector<Output> outputs;
  std::vector<Repr> slot_repr;
  std::vector<int32_t> slot_buffer;  // scratch buffer of each slot (-1: never needs one)
  int32_t buffers = 0;
  bool rows = false;  // tiles are (row, column block) pairs, else flat blocks
  int64_t tiles_per_row = 1, tiles = 0, grain = 1;
};

// Assigns the scratch buffers: operands hold theirs for the whole block (loaded first), a
// step's result from the step to its last use; a buffer is reused once its value is dead. A
// step never writes into a buffer one of its own operands still occupies (operand and result
// element sizes may differ).
void assign_buffers(Program& p, const std::vector<bool>& needs_buffer) {
  const auto slots = static_cast<int32_t>(p.slot_repr.size());
  std::vector<int32_t> last_use(static_cast<size_t>(slots), -1);
  for (int32_t i = 0; i < static_cast<int32_t>(p.steps.size()); ++i)
    for (int32_t s : p.steps[static_cast<size_t>(i)].in)
      if (s >= 0) last_use[static_cast<size_t>(s)] = i;
  for (const Output& o : p.outputs) last_use[static_cast<size_t>(o.slot)] = INT32_MAX;
  p.slot_buffer.assign(static_cast<size_t>(slots), -1);
  std::vector<int32_t> free_list;
  auto take = [&](int32_t slot) {
    if (!needs_buffer[static_cast<size_t>(slot)]) return;
    if (free_list.empty()) {
      p.slot_buffer[static_cast<size_t>(slot)] = p.buffers++;
    } else {
      p.slot_buffer[static_cast<size_t>(slot)] = free_list.back();
      free_list.pop_back();
    }
  };
  for (const Operand& o : p.operands) take(o.slot);
  for (int32_t i = 0; i < static_cast<int32_t>(p.steps.size()); ++i) {
    take(p.steps[static_cast<size_t>(i)].out);
    for (int32_t s = 0; s < slots; ++s)
      if (last_use[static_cast<size_t>(s)] == i && p.slot_buffer[static_cast<size_t>(s)] >= 0)
        free_list.push_back(p.slot_buffer[static_cast<size_t>(s)]);
  }
}

// The program of an elementwise body graph (inputs = the node's operands in order, constants,
// elementwise ops; the outputs are the node's results), or nullopt when a node has no native
// step or the outputs differ in shape.
std::optional<Program> build_program(const Graph& body) {
  Program p;
  const std::vector<Value>& outs = body.outputs();
  const Shape& shape = body.shape(outs[0]);
  for (Value v : outs)
    if (body.shape(v) != shape) return std::nullopt;

  // Live nodes: those some output depends on.
  std::vector<bool> live(body.nodes().size(), false);
  for (Value v : outs) live[static_cast<size_t>(v.node)] = true;
  for (size_t i = body.nodes().size(); i-- > 0;)
    if (live[i])
      for (Value v : body.nodes()[i].operands) live[static_cast<size_t>(v.node)] = true;

  std::vector<int32_t> input_index(body.nodes().size(), -1);
  {
    std::vector<int32_t> ins = body.inputs();
    for (size_t i = 0; i < ins.size(); ++i)
      input_index[static_cast<size_t>(ins[i])] = static_cast<int32_t>(i);
  }
  std::vector<int32_t> slot_of(body.nodes().size(), -1);
  std::vector<Shape> operand_shapes;
  auto new_slot = [&](DType t) {
    p.slot_repr.push_back(repr_of(t));
    return static_cast<int32_t>(p.slot_repr.size() - 1);
  };
  for (size_t id = 0; id < body.nodes().size(); ++id) {
    if (!live[id]) continue;
    const Node& n = body.nodes()[id];
    const TensorType& t = n.results[0];
    if (n.op == OpKind::Input || n.op == OpKind::Constant) {
      Operand o;
      o.dtype = t.dtype;
      o.input = input_index[id];
      if (n.op == OpKind::Constant)
        o.constant = std::make_shared<const Tensor>(evaluate_op(OpKind::Constant, {}, n.attrs)[0]);
      o.slot = slot_of[id] = new_slot(t.dtype);
      p.operands.push_back(std::move(o));
      operand_shapes.push_back(t.shape);
      continue;
    }
    if (!op_info(n.op).has(kElementwise) || n.op == OpKind::ElementwiseRegion) return std::nullopt;
    Step s;
    std::vector<DType> in;
    for (size_t k = 0; k < n.operands.size(); ++k) {
      s.in[k] = slot_of[static_cast<size_t>(n.operands[k].node)];
      in.push_back(body.dtype(n.operands[k]));
    }
    if (!pick_step(n.op, in, t.dtype, n.attrs, s)) return std::nullopt;
    s.out = slot_of[id] = new_slot(t.dtype);
    p.steps.push_back(s);
  }

  std::optional<BroadcastLayout> layout = BroadcastLayout::make(shape, operand_shapes);
  if (!layout) return std::nullopt;
  p.layout = std::move(*layout);
  const BroadcastLayout& l = p.layout;
  for (size_t k = 0; k < p.operands.size(); ++k)
    p.operands[k].access = l.dense(k)   ? Access::kDense
                           : l.splat(k) ? Access::kSplat
                                        : Access::kWalk;

  // A 16-bit result read only by stores is rounded by the store itself.
  std::vector<bool> read_by_step(p.slot_repr.size(), false);
  for (const Step& s : p.steps)
    for (int32_t k : s.in)
      if (k >= 0) read_by_step[static_cast<size_t>(k)] = true;
  for (Step& s : p.steps) s.round = s.round && read_by_step[static_cast<size_t>(s.out)];

  for (Value v : outs) p.outputs.push_back({slot_of[static_cast<size_t>(v.node)], body.dtype(v)});
  // The last step writes its result straight into the output memory when no conversion is
  // needed and no output is an operand (whose memory the write might overwrite before that
  // output is copied).
  bool output_is_operand = false;
  for (const Output& o : p.outputs)
    for (const Operand& op : p.operands) output_is_operand |= o.slot == op.slot;
  if (!p.steps.empty() && !output_is_operand)
    for (Output& o : p.outputs)
      if (o.slot == p.steps.back().out && !is_half(o.dtype)) {
        o.direct = true;
        break;
      }

  p.rows = l.inner() >= kBlock / 2 || l.rows() == 1;
  if (p.rows) {
    p.tiles_per_row = (l.inner() + kBlock - 1) / kBlock;
    p.tiles = l.rows() * p.tiles_per_row;
  } else {
    p.tiles = (l.numel + kBlock - 1) / kBlock;
  }
  int64_t tile_elems = p.rows ? std::min(l.inner(), kBlock) : kBlock;
  p.grain = std::max<int64_t>(1, kGrain / tile_elems);

  // Buffers: an operand read in place everywhere (unbroadcast, same storage as its Repr) needs
  // none; the directly written output needs none.
  std::vector<bool> needs(p.slot_repr.size(), true);
  for (size_t k = 0; k < p.operands.size(); ++k)
    if (p.operands[k].access == Access::kDense && !converts_on_load(p.operands[k].dtype))
      needs[static_cast<size_t>(p.operands[k].slot)] = false;
  for (const Output& o : p.outputs)
    if (o.direct) needs[static_cast<size_t>(o.slot)] = false;
  assign_buffers(p, needs);
  return p;
}

// ---- running a program

// Per-thread scratch of at least `bytes` (clones of an executable run concurrently and share
// kernels, so scratch is never captured by a kernel).
std::byte* scratch(size_t bytes) {
  struct Buffer {
    std::byte* ptr = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(ptr); }
  };
  thread_local Buffer buffer;
  if (buffer.size < bytes) {
    std::free(buffer.ptr);
    buffer.size = (bytes + 63) / 64 * 64;
    buffer.ptr = static_cast<std::byte*>(std::aligned_alloc(64, buffer.size));
  }
  return buffer.ptr;
}

// Writes n copies of element `src` (dtype t) as Repr values into dst.
void splat(DType t, const std::byte* src, void* dst, int64_t n) {
  if (t == DType::bool_) {
    std::fill_n(static_cast<uint8_t*>(dst), n, static_cast<uint8_t>(*src != std::byte{0}));
    return;
  }
  if (is_half(t)) {
    float v = t == DType::f16 ? to_f32(*reinterpret_cast<const f16*>(src))
                              : to_f32(*reinterpret_cast<const bf16*>(src));
    std::fill_n(static_cast<float*>(dst), n, v);
    return;
  }
  visit_repr(repr_of(t), [&](auto z) {
    using T = decltype(z);
    T v;
    std::memcpy(&v, src, sizeof(T));
    std::fill_n(static_cast<T*>(dst), n, v);
  });
}

// Copies n contiguous elements of dtype t into dst as Repr values.
void copy_in(DType t, const std::byte* src, void* dst, int64_t n) {
  if (t == DType::f16)
    load_f32(reinterpret_cast<const f16*>(src), static_cast<float*>(dst), n);
  else if (t == DType::bf16)
    load_f32(reinterpret_cast<const bf16*>(src), static_cast<float*>(dst), n);
  else if (t == DType::bool_)
    for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = src[i] != std::byte{0};
  else
    std::memcpy(dst, src, static_cast<size_t>(n) * static_cast<size_t>(dtype_size(t)));
}

void run_tiles(const Program& p, const KernelIO& io, int64_t t0, int64_t t1) {
  const BroadcastLayout& l = p.layout;
  const size_t slots = p.slot_repr.size();
  const size_t table = (slots * sizeof(void*) + 63) / 64 * 64;  // keeps buffers 64-aligned
  std::byte* mem = scratch(table + static_cast<size_t>(p.buffers) * kBufferBytes);
  auto** ptr = reinterpret_cast<void**>(mem);
  std::byte* buffers = mem + table;
  for (size_t s = 0; s < slots; ++s)
    ptr[s] = p.slot_buffer[s] >= 0 ? buffers + static_cast<size_t>(p.slot_buffer[s]) * kBufferBytes
                                   : nullptr;
  // Operand slots point into the operand's memory or into their buffer, chosen per tile.
  auto buffer_of = [&](int32_t slot) {
    return buffers + static_cast<size_t>(p.slot_buffer[static_cast<size_t>(slot)]) * kBufferBytes;
  };

  for (int64_t t = t0; t < t1; ++t) {
    int64_t start, n, row = 0, col = 0;
    if (p.rows) {
      row = t / p.tiles_per_row;
      col = (t % p.tiles_per_row) * kBlock;
      start = row * l.inner() + col;
      n = std::min(kBlock, l.inner() - col);
    } else {
      start = t * kBlock;
      n = std::min(kBlock, l.numel - start);
    }
    // Operands.
    for (size_t k = 0; k < p.operands.size(); ++k) {
      const Operand& o = p.operands[k];
      const std::byte* base = o.input >= 0 ? io.in[o.input] : o.constant->data();
      const auto esize = static_cast<size_t>(dtype_size(o.dtype));
      auto& dst = ptr[static_cast<size_t>(o.slot)];
      auto contiguous = [&](int64_t off) {
        const std::byte* src = base + static_cast<size_t>(off) * esize;
        if (converts_on_load(o.dtype)) {
          dst = buffer_of(o.slot);
          copy_in(o.dtype, src, dst, n);
        } else {
          dst = const_cast<std::byte*>(src);  // read only: steps write only their results
        }
      };
      auto constant = [&](int64_t off) {
        dst = buffer_of(o.slot);
        splat(o.dtype, base + static_cast<size_t>(off) * esize, dst, n);
      };
      if (p.rows) {
        int64_t off = l.row_offset(k, row);
        if (l.strides[k].back() == 1)
          contiguous(off + col);
        else
          constant(off);
      } else if (o.access == Access::kDense) {
        contiguous(start);
      } else if (o.access == Access::kSplat) {
        constant(0);
      } else {
        dst = buffer_of(o.slot);
        const size_t rsize = repr_size(repr_of(o.dtype));
        auto* out = static_cast<std::byte*>(dst);
        l.walk(k, start, n, [&](int64_t pos, int64_t len, int64_t off, int64_t step) {
          const std::byte* src = base + static_cast<size_t>(off) * esize;
          std::byte* d = out + static_cast<size_t>(pos) * rsize;
          if (step == 1)
            copy_in(o.dtype, src, d, len);
          else
            splat(o.dtype, src, d, len);
        });
      }
    }
    // Steps; the direct output's slot points into the output memory.
    for (const Output& o : p.outputs)
      if (o.direct)
        ptr[static_cast<size_t>(o.slot)] =
            io.out[&o - p.outputs.data()] +
            static_cast<size_t>(start) * static_cast<size_t>(dtype_size(o.dtype));
    for (const Step& s : p.steps) {
      const void* in[3] = {};
      for (int k = 0; k < 3; ++k)
        if (s.in[k] >= 0) in[k] = ptr[static_cast<size_t>(s.in[k])];
      void* out = ptr[static_cast<size_t>(s.out)];
      s.fn(s, in, out, n);
      if (s.round) vec_round_to(s.dst, static_cast<float*>(out), n);
    }
    // Stores.
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      const Output& o = p.outputs[k];
      const auto esize = static_cast<size_t>(dtype_size(o.dtype));
      std::byte* dst = io.out[k] + static_cast<size_t>(start) * esize;
      const void* src = ptr[static_cast<size_t>(o.slot)];
      if (o.dtype == DType::f16)
        store_f32(static_cast<const float*>(src), reinterpret_cast<f16*>(dst), n);
      else if (o.dtype == DType::bf16)
        store_f32(static_cast<const float*>(src), reinterpret_cast<bf16*>(dst), n);
      else if (src != dst)
        std::memcpy(dst, src, static_cast<size_t>(n) * esize);
    }
  }
}

Kernel make_kernel(std::optional<Program> program) {
  if (!program) return {};
  auto p = std::make_shared<const Program>(std::move(*program));
  return [p](const KernelIO& io) {
    struct Ctx {
      const Program* p;
      const KernelIO* io;
    } ctx{p.get(), &io};
    parallel_for(0, p->tiles, p->grain,
                 [c = &ctx](int64_t b, int64_t e) { run_tiles(*c->p, *c->io, b, e); });
  };
}

// A single elementwise op as a one-node body.
Kernel op_kernel(const Graph& g, const Node& node) {
  Graph body("op");
  std::vector<Value> ins;
  for (size_t i = 0; i < node.operands.size(); ++i)
    ins.push_back(
        body.input("x" + std::to_string(i), g.dtype(node.operands[i]), g.shape(node.operands[i])));
  body.set_outputs({body.emit1(node.op, std::move(ins), node.attrs)});
  return make_kernel(build_program(body));
}

Kernel region_kernel(const Graph&, const Node& node) {
  return make_kernel(build_program(node.attrs.get_graph("body")));
}

}  // namespace

void register_elementwise_kernels() {
  for (int i = 0; i < kNumOps; ++i) {
    auto op = static_cast<OpKind>(i);
    if (op_info(op).has(kElementwise) && op != OpKind::ElementwiseRegion)
      register_native(op, op_kernel,
                      "numpy broadcasting needs more than BroadcastLayout::kMaxRank collapsed "
                      "dims");
  }
  register_native(OpKind::ElementwiseRegion, region_kernel,
                  "the region's outputs differ in shape (no single iteration space), or its "
                  "broadcasting needs more than BroadcastLayout::kMaxRank collapsed dims");
}

}  // namespace rlx::cpu
