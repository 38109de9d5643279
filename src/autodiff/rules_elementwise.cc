// vjp rules of the elementwise ops: unary math, convert, activations, binary arithmetic with
// broadcasting, select and clamp. Each computes in the primal dtype, as JAX does.
#include <cmath>
#include <numbers>

#include "rules.h"

namespace rlx::autodiff::detail {
namespace {

using C = VjpContext;
using Grads = std::vector<Value>;

Value x0(C& c) { return c.operands[0]; }
Value y0(C& c) { return c.results[0]; }
Value k(C& c, double v) { return c.g.scalar(v, c.result_type().dtype); }

// Unary rule ct * f'(x), with f' built from x and y = f(x).
template <Value (*Deriv)(C&)>
Grads unary(C& c) {
  return {c.g.mul(c.ct(), Deriv(c))};
}

// d/dx of each unary op, as a value of x's type; the formula is the comment of each.
Value d_neg(C& c) { return k(c, -1); }  // -1
Value d_abs(C& c) {                     // sign(x) (0 at 0, as jax)
  return c.g.sign(x0(c));
}
Value d_exp(C& c) { return y0(c); }                      // e^x
Value d_expm1(C& c) { return c.g.add(y0(c), k(c, 1)); }  // e^x = y + 1
Value d_log(C& c) { return c.g.div(k(c, 1), x0(c)); }    // 1/x
Value d_log1p(C& c) {                                    // 1/(1+x)
  return c.g.div(k(c, 1), c.g.add(k(c, 1), x0(c)));
}
Value d_sqrt(C& c) { return c.g.div(k(c, 0.5), y0(c)); }  // 1/(2 sqrt x)
Value d_rsqrt(C& c) {                                     // -rsqrt(x)/(2x)
  return c.g.div(c.g.mul(k(c, -0.5), y0(c)), x0(c));
}
Value d_sin(C& c) { return c.g.cos(x0(c)); }           // cos x
Value d_cos(C& c) { return c.g.neg(c.g.sin(x0(c))); }  // -sin x
Value d_tan(C& c) {                                    // 1 + tan^2 x
  return c.g.add(k(c, 1), c.g.mul(y0(c), y0(c)));
}
Value d_tanh(C& c) {  // 1 - tanh^2 x
  return c.g.sub(k(c, 1), c.g.mul(y0(c), y0(c)));
}
Value d_atan(C& c) {  // 1/(1+x^2)
  return c.g.div(k(c, 1), c.g.add(k(c, 1), c.g.mul(x0(c), x0(c))));
}
Value d_logistic(C& c) {  // s (1 - s)
  return c.g.mul(y0(c), c.g.sub(k(c, 1), y0(c)));
}
Value d_cbrt(C& c) {  // 1 / (3 cbrt(x)^2), as jax's cbrt jvp
  return c.g.div(k(c, 1.0 / 3), c.g.mul(y0(c), y0(c)));
}
Value d_erf(C& c) {  // 2/sqrt(pi) e^{-x^2}
  Value x = x0(c);
  return c.g.mul(k(c, 2 / std::sqrt(std::numbers::pi)), c.g.exp(c.g.neg(c.g.mul(x, x))));
}
Value d_gelu(C& c) {  // Phi(x) + x phi(x), Phi the normal cdf and phi its density
  Graph& g = c.g;
  Value x = x0(c);
  Value cdf = g.mul(k(c, 0.5), g.add(k(c, 1), g.erf(g.mul(x, k(c, 1 / std::numbers::sqrt2)))));
  Value pdf =
      g.mul(k(c, 1 / std::sqrt(2 * std::numbers::pi)), g.exp(g.mul(k(c, -0.5), g.mul(x, x))));
  return g.add(cdf, g.mul(x, pdf));
}
Value d_silu(C& c) {  // s (1 + x (1 - s)), s = logistic(x)
  Graph& g = c.g;
  Value s = g.logistic(x0(c));
  return g.mul(s, g.add(k(c, 1), g.mul(x0(c), g.sub(k(c, 1), s))));
}

// relu: ct where x > 0 (0 at 0, as jax.nn.relu's custom jvp).
Grads vjp_relu(C& c) {
  Value x = x0(c);
  return {c.g.select(c.g.gt(x, k(c, 0)), c.ct(), k(c, 0))};
}

// leaky_relu: ct where x >= 0, alpha * ct elsewhere (the decomposition's select).
Grads vjp_leaky_relu(C& c) {
  Value x = x0(c);
  double alpha = c.node.attrs.get_float("alpha");
  return {c.g.select(c.g.ge(x, k(c, 0)), c.ct(), c.g.mul(c.ct(), k(c, alpha)))};
}

// convert between floats: the cotangent converted back; from a non-float, nothing.
Grads vjp_convert(C& c) {
  DType from = c.operand_type(0).dtype;
  if (!is_float(from)) return {Value{}};
  return {c.g.convert(c.ct(), from)};
}

// Binary ops: each operand's partial times ct, summed back to the operand's shape.
Grads binary_out(C& c, Value dx, Value dy) {
  Grads out(2);
  if (c.wants[0] && dx.valid()) out[0] = unbroadcast(c.g, dx, c.operand_type(0).shape);
  if (c.wants[1] && dy.valid()) out[1] = unbroadcast(c.g, dy, c.operand_type(1).shape);
  return out;
}

Grads vjp_add(C& c) { return binary_out(c, c.ct(), c.ct()); }
Grads vjp_sub(C& c) { return binary_out(c, c.ct(), c.wants[1] ? c.g.neg(c.ct()) : Value{}); }
// d(xy) = y dx + x dy
Grads vjp_mul(C& c) {
  Value x = c.operands[0], y = c.operands[1];
  return binary_out(c, c.wants[0] ? c.g.mul(c.ct(), y) : Value{},
                    c.wants[1] ? c.g.mul(c.ct(), x) : Value{});
}
// d(x/y) = dx / y - (x/y) dy / y
Grads vjp_div(C& c) {
  Value y = c.operands[1];
  Value dx = c.g.div(c.ct(), y);
  return binary_out(c, dx, c.wants[1] ? c.g.neg(c.g.mul(dx, y0(c))) : Value{});
}
// d(x^y) = y x^(y-1) dx + log(x) x^y dy; as jax: 0 for dx where y == 0, log(0) taken as 0.
Grads vjp_pow(C& c) {
  Graph& g = c.g;
  Value x = c.operands[0], y = c.operands[1];
  Value zero = k(c, 0);
  Value dx, dy;
  if (c.wants[0]) {
    Value jac = g.mul(y, g.pow(x, g.sub(y, k(c, 1))));
    dx = g.mul(c.ct(), g.select(g.eq(y, zero), zero, jac));
  }
  if (c.wants[1]) {
    Value safe_x = g.select(g.eq(x, zero), k(c, 1), x);
    dy = g.mul(c.ct(), g.mul(g.log(safe_x), y0(c)));
  }
  return binary_out(c, dx, dy);
}
// max / min: the cotangent goes to the chosen operand, split evenly on ties (jax's
// _balanced_eq).
template <bool kMax>
Grads vjp_extremum(C& c) {
  Graph& g = c.g;
  Value x = c.operands[0], y = c.operands[1];
  Value half = k(c, 0.5), one = k(c, 1), zero = k(c, 0);
  auto share = [&](Value a, Value b) {
    Value wins = kMax ? g.gt(a, b) : g.lt(a, b);
    return g.mul(c.ct(), g.select(wins, one, g.select(g.eq(a, b), half, zero)));
  };
  return binary_out(c, c.wants[0] ? share(x, y) : Value{}, c.wants[1] ? share(y, x) : Value{});
}
// rem(x, y) = x - y trunc(x / y): dx = ct, dy = -ct trunc(x / y) (lax's rem rule).
Grads vjp_rem(C& c) {
  Graph& g = c.g;
  Value dy;
  if (c.wants[1]) {
    Value q = g.div(c.operands[0], c.operands[1]);
    dy = g.neg(g.mul(c.ct(), g.mul(g.sign(q), g.floor(g.abs(q)))));
  }
  return binary_out(c, c.ct(), dy);
}

// select(p, a, b): ct to a where p, to b elsewhere.
Grads vjp_select(C& c) {
  Graph& g = c.g;
  Value p = c.operands[0], zero = k(c, 0);
  Grads out(3);
  if (c.wants[1]) out[1] = unbroadcast(g, g.select(p, c.ct(), zero), c.operand_type(1).shape);
  if (c.wants[2]) out[2] = unbroadcast(g, g.select(p, zero, c.ct()), c.operand_type(2).shape);
  return out;
}

// clamp(lo, x, hi), as lax's clamp rule: x gets ct where lo < x < hi; lo where lo > x (and
// lo < hi); hi where hi < x.
Grads vjp_clamp(C& c) {
  Graph& g = c.g;
  Value lo = c.operands[0], x = c.operands[1], hi = c.operands[2], zero = k(c, 0);
  Grads out(3);
  auto pick = [&](Value cond, size_t i) {
    out[i] = unbroadcast(g, g.select(cond, c.ct(), zero), c.operand_type(i).shape);
  };
  if (c.wants[0]) pick(g.logical_and(g.gt(lo, x), g.lt(lo, hi)), 0);
  if (c.wants[1]) pick(g.logical_and(g.gt(x, lo), g.lt(x, hi)), 1);
  if (c.wants[2]) pick(g.lt(hi, x), 2);
  return out;
}

}  // namespace

void register_vjp_elementwise() {
  set_vjp(OpKind::Neg, unary<d_neg>);
  set_vjp(OpKind::Abs, unary<d_abs>);
  set_vjp(OpKind::Exp, unary<d_exp>);
  set_vjp(OpKind::Expm1, unary<d_expm1>);
  set_vjp(OpKind::Log, unary<d_log>);
  set_vjp(OpKind::Log1p, unary<d_log1p>);
  set_vjp(OpKind::Sqrt, unary<d_sqrt>);
  set_vjp(OpKind::Rsqrt, unary<d_rsqrt>);
  set_vjp(OpKind::Sin, unary<d_sin>);
  set_vjp(OpKind::Cos, unary<d_cos>);
  set_vjp(OpKind::Tan, unary<d_tan>);
  set_vjp(OpKind::Tanh, unary<d_tanh>);
  set_vjp(OpKind::Atan, unary<d_atan>);
  set_vjp(OpKind::Logistic, unary<d_logistic>);
  set_vjp(OpKind::Erf, unary<d_erf>);
  set_vjp(OpKind::Cbrt, unary<d_cbrt>);
  set_vjp(OpKind::Gelu, unary<d_gelu>);
  set_vjp(OpKind::Silu, unary<d_silu>);
  set_vjp(OpKind::Relu, vjp_relu);
  set_vjp(OpKind::LeakyRelu, vjp_leaky_relu);
  set_vjp(OpKind::Convert, vjp_convert);
  set_vjp(OpKind::Add, vjp_add);
  set_vjp(OpKind::Sub, vjp_sub);
  set_vjp(OpKind::Mul, vjp_mul);
  set_vjp(OpKind::Div, vjp_div);
  set_vjp(OpKind::Pow, vjp_pow);
  set_vjp(OpKind::Max, vjp_extremum<true>);
  set_vjp(OpKind::Min, vjp_extremum<false>);
  set_vjp(OpKind::Rem, vjp_rem);
  set_vjp(OpKind::Select, vjp_select);
  set_vjp(OpKind::Clamp, vjp_clamp);
}

}  // namespace rlx::autodiff::detail
