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
// SIMD (vec_math.h); f64, integer and bool steps are scalar loops over the reference evaluator's
// own scalar functions (rlx/ir/scalar_ops.h), so they match it bit for bit.
//
// Which step an op runs is data: one table (fill_elementwise_table, an OpTable<ElementwiseOp>)
// gives per op its step for each computation type, the vec_math.h code of its f32 step, whether
// its result keeps the 16-bit value set, and its kernel factory. The ops registered natively
// are exactly the table's keys; adding an elementwise op is one line there.
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
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "../kernel.h"
#include "broadcast.h"
#include "half.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/scalar_ops.h"
#include "rlx/runtime/threading.h"
#include "vec_math.h"

namespace rlx::cpu {
namespace {

// Elements per block. A buffer holds a block of the widest Repr (8 bytes), so 4 KiB: the few
// live buffers of a typical body stay in a 32 KiB L1 data cache.
constexpr int64_t kBlock = 512;
constexpr size_t kBufferBytes = kBlock * sizeof(double);
constexpr int64_t kGrain = kParallelChunkElements;  // elements per parallel chunk, at least

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
  DType src = DType::f32;        // dtype of the primary operand (convert: its source)
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
    y[i] = round_from_double(
        scalar::pow<double>(static_cast<double>(a[i]), static_cast<double>(b[i])), s.dst);
}
// cbrt in double (C cbrt), rounded once: exactly the reference (Highway has no cube root).
void f32_cbrt(const Step& s, const void* const* in, void* out, int64_t n) {
  const float* x = arg<float>(in, 0);
  auto* y = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = round_from_double(scalar::cbrt(x[i]), s.dst);
}
void f32_rem(const Step&, const void* const* in, void* out, int64_t n) {
  const float *a = arg<float>(in, 0), *b = arg<float>(in, 1);
  auto* y = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = std::fmod(a[i], b[i]);
}

// Scalar steps on the computation type T (f64, integers, bool as uint8_t 0 / 1): loops over
// the reference evaluator's scalar functions (rlx/ir/scalar_ops.h), so they match it bit for
// bit. F is a captureless lambda calling one of them: a type, so the call is inlined into the
// loop. Class templates, so that the table's builders can take the loop as a parameter.
template <class T, class F>
struct Map1 {  // y = F(x)
  static void run(const Step&, const void* const* in, void* out, int64_t n) {
    const T* x = arg<T>(in, 0);
    T* y = static_cast<T*>(out);
    for (int64_t i = 0; i < n; ++i) y[i] = F{}(x[i]);
  }
};
template <class T, class F>
struct Map2 {  // y = F(a, b)
  static void run(const Step&, const void* const* in, void* out, int64_t n) {
    const T *a = arg<T>(in, 0), *b = arg<T>(in, 1);
    T* y = static_cast<T*>(out);
    for (int64_t i = 0; i < n; ++i) y[i] = F{}(a[i], b[i]);
  }
};
template <class T, class F>
struct Map3 {  // y = F(a, b, c)
  static void run(const Step&, const void* const* in, void* out, int64_t n) {
    const T *a = arg<T>(in, 0), *b = arg<T>(in, 1), *c = arg<T>(in, 2);
    T* y = static_cast<T*>(out);
    for (int64_t i = 0; i < n; ++i) y[i] = F{}(a[i], b[i], c[i]);
  }
};
template <class T, class Cmp>
struct Compare {  // y = Cmp(a, b) as a bool byte
  static void run(const Step&, const void* const* in, void* out, int64_t n) {
    const T *a = arg<T>(in, 0), *b = arg<T>(in, 1);
    auto* y = static_cast<uint8_t*>(out);
    for (int64_t i = 0; i < n; ++i) y[i] = Cmp{}(a[i], b[i]);
  }
};
template <class T, class = void>
struct Pick {  // select: y = p ? a : b
  static void run(const Step&, const void* const* in, void* out, int64_t n) {
    const uint8_t* p = arg<uint8_t>(in, 0);
    const T *a = arg<T>(in, 1), *b = arg<T>(in, 2);
    T* y = static_cast<T*>(out);
    for (int64_t i = 0; i < n; ++i) y[i] = p[i] ? a[i] : b[i];
  }
};

void f64_leaky_relu(const Step& s, const void* const* in, void* out, int64_t n) {
  const double* x = arg<double>(in, 0);
  auto* y = static_cast<double*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = scalar::leaky_relu(x[i], s.alpha);
}

// ---- convert (the reference's eval_convert / Tensor::set_f64 / set_i64 rules)

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

// Float -> integer: truncation toward zero, saturating at D's range, NaN -> 0.
template <class S, class D>
void cvt_saturate(const Step&, const void* const* in, void* out, int64_t n) {
  const S* x = arg<S>(in, 0);
  D* y = static_cast<D*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = scalar::saturate<D>(static_cast<double>(x[i]));
}

// f64 or integer -> f16 / bf16 (held as f32), rounded once from the exact value (int64 through
// its round-to-odd double, so that the final rounding is the only one).
template <class S>
void cvt_to_half(const Step& s, const void* const* in, void* out, int64_t n) {
  const S* x = arg<S>(in, 0);
  auto* y = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if constexpr (std::is_same_v<S, int64_t>)
      v = scalar::to_double_round_odd(x[i]);
    else
      v = static_cast<double>(x[i]);
    y[i] = round_from_double(v, s.dst);
  }
}

// f32 / f16 / bf16 -> f32 / f16 / bf16: the f32 value, rounded by the step when narrower.
void cvt_f32_copy(const Step&, const void* const* in, void* out, int64_t n) {
  if (in[0] != out) std::memcpy(out, in[0], static_cast<size_t>(n) * sizeof(float));
}

// The convert step from src to dst, or nullptr.
StepFn convert_fn(DType src, DType dst) {
  Repr rs = repr_of(src), rd = repr_of(dst);
  bool src_float = is_float(src);
  if (rs == Repr::kF32 && rd == Repr::kF32) return cvt_f32_copy;
  return visit_repr(rs, [&](auto s) -> StepFn {
    using S = decltype(s);
    if (dst == DType::bool_) return cvt_to_bool<S>;
    if (is_half(dst)) return cvt_to_half<S>;
    return visit_repr(rd, [&](auto d) -> StepFn {
      using D = decltype(d);
      if constexpr (std::is_integral_v<D>)
        if (src_float) return cvt_saturate<S, D>;
      return cvt_cast<S, D>;
    });
  });
}

// ---- the table: how each elementwise op runs

Kernel op_kernel(const Graph& g, const Node& node);
Kernel region_kernel(const Graph& g, const Node& node);

constexpr size_t kNumReprs = 7;
constexpr size_t at(Repr r) { return static_cast<size_t>(r); }

/// The f32 step of an op (f32, and f16 / bf16 widened to f32): a vec_math.h function with its
/// code, or a step of its own.
struct F32Step {
  F32Step(VecFn f) : fn(f32_apply), code(static_cast<uint8_t>(f)) {}
  F32Step(VecBinary f) : fn(f32_binary), code(static_cast<uint8_t>(f)) {}
  F32Step(VecCompare f) : fn(f32_compare), code(static_cast<uint8_t>(f)) {}
  F32Step(StepFn f) : fn(f) {}
  StepFn fn;
  uint8_t code = 0;
};

/// The elementwise family's entry of one op: its step per computation type and what the steps
/// need. The table's keys are exactly the ops this family registers natively.
struct ElementwiseOp {
  /// The step for each Repr of the primary operand; nullptr where the op has none.
  std::array<StepFn, kNumReprs> steps{};
  /// The vec_math.h code (VecFn / VecBinary / VecCompare) of the f32 SIMD step.
  uint8_t code = 0;
  /// The operand whose dtype picks the step: 0, or 1 for select (its branches).
  uint8_t primary = 0;
  /// Whether the f32 result of 16-bit operands is always a value of their dtype (sign flips,
  /// integral results, picks among operands, or rounded by the step itself), so that it needs
  /// no rounding back to f16 / bf16.
  bool keeps_value_set = false;
  /// The float attribute the steps read as Step::alpha (leaky_relu's "alpha"), or nullptr.
  const char* alpha_attr = nullptr;
  /// convert: the step from the operand and result dtypes, used instead of `steps`.
  StepFn (*convert)(DType src, DType dst) = nullptr;
  /// The native kernel: one step per node, or elementwise_region's program of steps.
  KernelFactory factory = op_kernel;
  /// When the factory declines a node (KernelEntry::declines).
  const char* declines =
      "numpy broadcasting needs more than BroadcastLayout::kMaxRank collapsed dims";
};

// Builders of the entries: f32 is the SIMD step, F a lambda calling a scalar_ops.h function
// (run by the f64, integer and bool steps).

/// Sets steps[r] = Loop<T, F>::run for the integer Reprs and their types T.
template <template <class, class> class Loop, class F>
void set_integer_steps(ElementwiseOp& e) {
  e.steps[at(Repr::kI8)] = Loop<int8_t, F>::run;
  e.steps[at(Repr::kU8)] = Loop<uint8_t, F>::run;
  e.steps[at(Repr::kI32)] = Loop<int32_t, F>::run;
  e.steps[at(Repr::kI64)] = Loop<int64_t, F>::run;
}

/// An op on floats: the f32 step, and Loop (Map1 / Map2 / Map3 by arity) over F in f64.
template <template <class, class> class Loop, class F>
ElementwiseOp floats(F32Step f32, F) {
  ElementwiseOp e;
  e.steps[at(Repr::kF32)] = f32.fn;
  e.code = f32.code;
  e.steps[at(Repr::kF64)] = Loop<double, F>::run;
  return e;
}
/// An op on floats and integers.
template <template <class, class> class Loop, class F>
ElementwiseOp numeric(F32Step f32, F f) {
  ElementwiseOp e = floats<Loop>(f32, f);
  set_integer_steps<Loop, F>(e);
  return e;
}
/// An op on integers (Loop over F) and bool (Loop over B on 0 / 1 bytes).
template <template <class, class> class Loop, class F, class B>
ElementwiseOp integer_and_bool(F, B) {
  ElementwiseOp e;
  set_integer_steps<Loop, F>(e);
  e.steps[at(Repr::kBool)] = Loop<uint8_t, B>::run;
  return e;
}
/// A comparison (every dtype): IEEE on floats, so false with a NaN operand except for ne.
template <class Cmp>
ElementwiseOp comparison(VecCompare f32, Cmp) {
  ElementwiseOp e = numeric<Compare>(f32, Cmp{});
  e.steps[at(Repr::kBool)] = Compare<uint8_t, Cmp>::run;
  return e;
}
/// `e` with keeps_value_set.
ElementwiseOp keeps(ElementwiseOp e) {
  e.keeps_value_set = true;
  return e;
}

/// Fills the table, one entry per op. To add an elementwise op: its scalar function in
/// rlx/ir/scalar_ops.h (the evaluator uses it too), for floats a vec_math.h function, and its
/// line here.
void fill_elementwise_table(OpTable<ElementwiseOp>& t) {
  // ---- unary
  t.set(OpKind::Neg, keeps(numeric<Map1>(VecFn::kNeg, [](auto x) { return scalar::neg(x); })));
  t.set(OpKind::Abs, keeps(numeric<Map1>(VecFn::kAbs, [](auto x) { return scalar::abs(x); })));
  t.set(OpKind::Sign, keeps(numeric<Map1>(VecFn::kSign, [](auto x) { return scalar::sign(x); })));
  t.set(OpKind::Exp, floats<Map1>(VecFn::kExp, [](auto x) { return scalar::exp(x); }));
  t.set(OpKind::Expm1, floats<Map1>(VecFn::kExpm1, [](auto x) { return scalar::expm1(x); }));
  t.set(OpKind::Log, floats<Map1>(VecFn::kLog, [](auto x) { return scalar::log(x); }));
  t.set(OpKind::Log1p, floats<Map1>(VecFn::kLog1p, [](auto x) { return scalar::log1p(x); }));
  t.set(OpKind::Sqrt, floats<Map1>(VecFn::kSqrt, [](auto x) { return scalar::sqrt(x); }));
  t.set(OpKind::Rsqrt, floats<Map1>(f32_rsqrt, [](auto x) { return scalar::rsqrt(x); }));
  t.set(OpKind::Sin, floats<Map1>(VecFn::kSin, [](auto x) { return scalar::sin(x); }));
  t.set(OpKind::Cos, floats<Map1>(VecFn::kCos, [](auto x) { return scalar::cos(x); }));
  t.set(OpKind::Tan, floats<Map1>(VecFn::kTan, [](auto x) { return scalar::tan(x); }));
  t.set(OpKind::Tanh, floats<Map1>(VecFn::kTanh, [](auto x) { return scalar::tanh(x); }));
  t.set(OpKind::Atan, floats<Map1>(VecFn::kAtan, [](auto x) { return scalar::atan(x); }));
  t.set(OpKind::Logistic,
        floats<Map1>(VecFn::kLogistic, [](auto x) { return scalar::logistic(x); }));
  t.set(OpKind::Erf, floats<Map1>(VecFn::kErf, [](auto x) { return scalar::erf(x); }));
  t.set(OpKind::Cbrt, keeps(floats<Map1>(f32_cbrt, [](auto x) { return scalar::cbrt(x); })));
  t.set(OpKind::Floor, keeps(floats<Map1>(VecFn::kFloor, [](auto x) { return scalar::floor(x); })));
  t.set(OpKind::Ceil, keeps(floats<Map1>(VecFn::kCeil, [](auto x) { return scalar::ceil(x); })));
  t.set(OpKind::Round, keeps(floats<Map1>(VecFn::kRound, [](auto x) { return scalar::round(x); })));
  t.set(OpKind::Not, integer_and_bool<Map1>([](auto x) { return scalar::bit_not(x); },
                                            [](auto x) { return scalar::logical_not(x); }));
  {
    ElementwiseOp e;  // the step depends on both dtypes
    e.convert = convert_fn;
    t.set(OpKind::Convert, e);
  }

  // ---- activations
  t.set(OpKind::Relu, keeps(numeric<Map1>(VecFn::kRelu, [](auto x) { return scalar::relu(x); })));
  t.set(OpKind::Gelu, floats<Map1>(VecFn::kGelu, [](auto x) { return scalar::gelu(x); }));
  t.set(OpKind::GeluTanh,
        floats<Map1>(VecFn::kGeluTanh, [](auto x) { return scalar::gelu_tanh(x); }));
  t.set(OpKind::Silu, floats<Map1>(VecFn::kSilu, [](auto x) { return scalar::silu(x); }));
  t.set(OpKind::Softplus,
        floats<Map1>(VecFn::kSoftplus, [](auto x) { return scalar::softplus(x); }));
  {
    ElementwiseOp e;  // computed in f64 either way (vec_math.h), so exact
    e.steps[at(Repr::kF32)] = f32_leaky_relu;
    e.steps[at(Repr::kF64)] = f64_leaky_relu;
    e.alpha_attr = "alpha";
    t.set(OpKind::LeakyRelu, e);
  }

  // ---- binary (pow is rounded from double by its f32 step; rem is exact)
  auto add = [](auto a, auto b) { return scalar::add(a, b); };
  auto sub = [](auto a, auto b) { return scalar::sub(a, b); };
  auto mul = [](auto a, auto b) { return scalar::mul(a, b); };
  auto div = [](auto a, auto b) { return scalar::div(a, b); };
  auto pow = [](auto a, auto b) { return scalar::pow(a, b); };
  auto max = [](auto a, auto b) { return scalar::max(a, b); };
  auto min = [](auto a, auto b) { return scalar::min(a, b); };
  auto rem = [](auto a, auto b) { return scalar::rem(a, b); };
  t.set(OpKind::Add, numeric<Map2>(VecBinary::kAdd, add));
  t.set(OpKind::Sub, numeric<Map2>(VecBinary::kSub, sub));
  t.set(OpKind::Mul, numeric<Map2>(VecBinary::kMul, mul));
  t.set(OpKind::Div, numeric<Map2>(VecBinary::kDiv, div));
  t.set(OpKind::Pow, keeps(numeric<Map2>(f32_pow, pow)));
  t.set(OpKind::Max, keeps(numeric<Map2>(VecBinary::kMax, max)));
  t.set(OpKind::Min, keeps(numeric<Map2>(VecBinary::kMin, min)));
  t.set(OpKind::Rem, keeps(numeric<Map2>(f32_rem, rem)));
  t.set(OpKind::And, integer_and_bool<Map2>(std::bit_and<>{}, std::bit_and<>{}));
  t.set(OpKind::Or, integer_and_bool<Map2>(std::bit_or<>{}, std::bit_or<>{}));
  t.set(OpKind::Xor, integer_and_bool<Map2>(std::bit_xor<>{}, std::bit_xor<>{}));
  t.set(OpKind::Eq, comparison(VecCompare::kEq, std::equal_to<>{}));
  t.set(OpKind::Ne, comparison(VecCompare::kNe, std::not_equal_to<>{}));
  t.set(OpKind::Lt, comparison(VecCompare::kLt, std::less<>{}));
  t.set(OpKind::Le, comparison(VecCompare::kLe, std::less_equal<>{}));
  t.set(OpKind::Gt, comparison(VecCompare::kGt, std::greater<>{}));
  t.set(OpKind::Ge, comparison(VecCompare::kGe, std::greater_equal<>{}));

  // ---- ternary
  {
    ElementwiseOp e = keeps(numeric<Pick>(f32_select, nullptr));  // every dtype, bit for bit
    e.steps[at(Repr::kBool)] = Pick<uint8_t>::run;
    e.primary = 1;  // the branches pick the step
    t.set(OpKind::Select, e);
  }
  t.set(OpKind::Clamp, keeps(numeric<Map3>(f32_clamp, [](auto lo, auto x, auto hi) {
          return scalar::clamp(lo, x, hi);
        })));

  // ---- the region: a program of the steps above
  {
    ElementwiseOp e;
    e.factory = region_kernel;
    e.declines =
        "the region's outputs differ in shape (no single iteration space), or its "
        "broadcasting needs more than BroadcastLayout::kMaxRank collapsed dims";
    t.set(OpKind::ElementwiseRegion, e);
  }
}

const OpTable<ElementwiseOp>& elementwise_table() {
  static const OpTable<ElementwiseOp> table("cpu elementwise table", fill_elementwise_table);
  return table;
}

// ---- choosing a step for a node

// Fills s.fn / code / alpha / round for `op` on operands of dtypes `in` with result dtype
// `out` from the table, or returns false when there is no native step for the combination.
bool pick_step(OpKind op, const std::vector<DType>& in, DType out, const AttrMap& attrs, Step& s) {
  const ElementwiseOp* e = elementwise_table().find(op);
  if (e == nullptr || e->factory != op_kernel) return false;
  s.dst = out;
  s.src = in.empty() ? out : in[e->primary];
  if (e->alpha_attr != nullptr) s.alpha = attrs.get_float(e->alpha_attr);
  if (e->convert != nullptr) {
    s.fn = e->convert(s.src, out);
    s.round = s.fn == cvt_f32_copy && is_half(out) && s.src != out;
    return s.fn != nullptr;
  }
  s.fn = e->steps[at(repr_of(s.src))];
  s.code = e->code;
  s.round = s.fn != nullptr && is_half(out) && !e->keeps_value_set;
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
  // One value per tile (a splat, or in row tiles an operand constant along the row): its
  // buffer is filled once per run_tiles call (per row) and no step reuses it.
  bool hoisted = false;
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
  for (const Operand& o : p.operands)
    if (o.hoisted) last_use[static_cast<size_t>(o.slot)] = INT32_MAX;
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
  for (size_t k = 0; k < p.operands.size(); ++k)
    p.operands[k].hoisted =
        p.rows ? l.strides[k].back() == 0 : p.operands[k].access == Access::kSplat;

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

// dst[0, n) = v, vectorized (-O2 leaves std::fill_n a scalar loop, which cost more than the
// SIMD steps reading the buffer).
template <class T>
void fill(T* dst, int64_t n, T v) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = v;
}

// Writes n copies of element `src` (dtype t) as Repr values into dst.
void splat(DType t, const std::byte* src, void* dst, int64_t n) {
  if (t == DType::bool_) {
    fill(static_cast<uint8_t*>(dst), n, static_cast<uint8_t>(*src != std::byte{0}));
    return;
  }
  if (is_half(t)) {
    float v = t == DType::f16 ? to_f32(*reinterpret_cast<const f16*>(src))
                              : to_f32(*reinterpret_cast<const bf16*>(src));
    fill(static_cast<float*>(dst), n, v);
    return;
  }
  visit_repr(repr_of(t), [&](auto z) {
    using T = decltype(z);
    T v;
    std::memcpy(&v, src, sizeof(T));
    fill(static_cast<T*>(dst), n, v);
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
  // The row whose value each hoisted operand's buffer holds (-1: not filled yet).
  constexpr size_t kMaxHoisted = 64;
  std::array<int64_t, kMaxHoisted> filled;
  filled.fill(-1);
  const int64_t hoisted_len = p.rows ? std::min(kBlock, l.inner()) : kBlock;  // longest tile

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
        if (o.hoisted && k < kMaxHoisted) {  // filled whole once, kept while the row lasts
          if (filled[k] == row) return;
          filled[k] = row;
          splat(o.dtype, base + static_cast<size_t>(off) * esize, dst, hoisted_len);
          return;
        }
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

// Registers every op of the table as native for its whole dtype class, after checking that each
// of those dtypes has a step.
void register_elementwise_kernels() {
  const OpTable<ElementwiseOp>& t = elementwise_table();
  for (OpKind op : t.keys()) {
    const ElementwiseOp& e = t.at(op);
    for (int i = 0; i < kNumDTypes && e.factory == op_kernel; ++i) {
      auto d = static_cast<DType>(i);
      if (!op_info(op).dtypes.contains(d)) continue;
      bool covered = e.steps[at(repr_of(d))] != nullptr;
      if (e.convert != nullptr) {
        covered = true;
        for (int k = 0; k < kNumDTypes; ++k)
          covered = covered && e.convert(d, static_cast<DType>(k)) != nullptr;
      }
      check(covered, "cpu elementwise table: op '" + std::string(op_name(op)) +
                         "' has no step for " + std::string(dtype_name(d)));
    }
    register_native(op, e.factory, e.declines);
  }
}

}  // namespace rlx::cpu
