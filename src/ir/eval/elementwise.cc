// Reference kernels for elementwise ops: unary math, convert, activations, binary arithmetic,
// bitwise and compare ops, select and clamp; the scalar semantics are rlx/ir/scalar_ops.h's.
#include <cstring>

#include "eval.h"
#include "rlx/ir/scalar_ops.h"

namespace rlx::detail {
namespace {

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
    out.set_i64(i, logical ? scalar::logical_not(v) : scalar::bit_not(v));
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
      out.set_f64(i, scalar::to_double_round_odd(x.get_i64(i)));
    else
      out.set_i64(i, x.get_i64(i));
  }
  return {out};
}

std::vector<Tensor> eval_leaky_relu(const EvalContext& ctx) {
  double alpha = ctx.attrs().get_float("alpha");
  return unary_float(ctx, [alpha](double x) { return scalar::leaky_relu(x, alpha); });
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

// lax.clamp(lo, x, hi) (scalar::clamp).
std::vector<Tensor> eval_clamp(const EvalContext& ctx) {
  const Tensor &lo = ctx.operands[0], &x = ctx.operands[1], &hi = ctx.operands[2];
  Tensor out = make_result(ctx);
  BroadcastIndexer il(lo.shape(), out.shape()), ix(x.shape(), out.shape()),
      ih(hi.shape(), out.shape());
  bool fl = is_float(out.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (fl)
      out.set_f64(i, scalar::clamp(lo.get_f64(il(i)), x.get_f64(ix(i)), hi.get_f64(ih(i))));
    else
      out.set_i64(i, scalar::clamp(lo.get_i64(il(i)), x.get_i64(ix(i)), hi.get_i64(ih(i))));
  }
  return {out};
}

}  // namespace

void register_eval_elementwise() {
  using C = const EvalContext&;
  using I = int64_t;  // integers are computed in int64 and wrapped to the dtype by set_i64
  // ---- unary
  set_eval(OpKind::Neg, [](C c) { return unary(c, scalar::neg<double>, scalar::neg<I>); });
  set_eval(OpKind::Abs, [](C c) { return unary(c, scalar::abs<double>, scalar::abs<I>); });
  set_eval(OpKind::Sign, [](C c) { return unary(c, scalar::sign<double>, scalar::sign<I>); });
  set_eval(OpKind::Exp, [](C c) { return unary_float(c, scalar::exp); });
  set_eval(OpKind::Expm1, [](C c) { return unary_float(c, scalar::expm1); });
  set_eval(OpKind::Log, [](C c) { return unary_float(c, scalar::log); });
  set_eval(OpKind::Log1p, [](C c) { return unary_float(c, scalar::log1p); });
  set_eval(OpKind::Sqrt, [](C c) { return unary_float(c, scalar::sqrt); });
  set_eval(OpKind::Rsqrt, [](C c) { return unary_float(c, scalar::rsqrt); });
  set_eval(OpKind::Sin, [](C c) { return unary_float(c, scalar::sin); });
  set_eval(OpKind::Cos, [](C c) { return unary_float(c, scalar::cos); });
  set_eval(OpKind::Tan, [](C c) { return unary_float(c, scalar::tan); });
  set_eval(OpKind::Tanh, [](C c) { return unary_float(c, scalar::tanh); });
  set_eval(OpKind::Atan, [](C c) { return unary_float(c, scalar::atan); });
  set_eval(OpKind::Logistic, [](C c) { return unary_float(c, scalar::logistic); });
  set_eval(OpKind::Erf, [](C c) { return unary_float(c, scalar::erf); });
  set_eval(OpKind::Cbrt, [](C c) { return unary_float(c, scalar::cbrt); });
  set_eval(OpKind::Floor, [](C c) { return unary_float(c, scalar::floor); });
  set_eval(OpKind::Ceil, [](C c) { return unary_float(c, scalar::ceil); });
  set_eval(OpKind::Round, [](C c) { return unary_float(c, scalar::round); });
  set_eval(OpKind::Not, eval_not);
  set_eval(OpKind::Convert, eval_convert);
  // stop_gradient only matters to autodiff; its value is the operand, copied bit for bit.
  set_eval(OpKind::StopGradient, [](C c) { return std::vector<Tensor>{c.operands[0].clone()}; });

  // ---- activations
  set_eval(OpKind::Relu, [](C c) { return unary(c, scalar::relu<double>, scalar::relu<I>); });
  set_eval(OpKind::Gelu, [](C c) { return unary_float(c, scalar::gelu); });
  set_eval(OpKind::GeluTanh, [](C c) { return unary_float(c, scalar::gelu_tanh); });
  set_eval(OpKind::Silu, [](C c) { return unary_float(c, scalar::silu); });
  set_eval(OpKind::Softplus, [](C c) { return unary_float(c, scalar::softplus); });
  set_eval(OpKind::LeakyRelu, eval_leaky_relu);

  // ---- binary arithmetic
  set_eval(OpKind::Add, [](C c) { return binary(c, scalar::add<double>, scalar::add<I>); });
  set_eval(OpKind::Sub, [](C c) { return binary(c, scalar::sub<double>, scalar::sub<I>); });
  set_eval(OpKind::Mul, [](C c) { return binary(c, scalar::mul<double>, scalar::mul<I>); });
  set_eval(OpKind::Div, [](C c) { return binary(c, scalar::div<double>, scalar::div<I>); });
  set_eval(OpKind::Pow, [](C c) { return binary(c, scalar::pow<double>, scalar::pow<I>); });
  set_eval(OpKind::Rem, [](C c) { return binary(c, scalar::rem<double>, scalar::rem<I>); });
  set_eval(OpKind::Max, [](C c) { return binary(c, scalar::max<double>, scalar::max<I>); });
  set_eval(OpKind::Min, [](C c) { return binary(c, scalar::min<double>, scalar::min<I>); });

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
