// Decompositions of the composite activations (relu, gelu, gelu_tanh, silu, softplus,
// leaky_relu) into elementwise primitives, in the operand's dtype, and of stop_gradient.
#include <cmath>
#include <numbers>

#include "decompose.h"

namespace rlx::detail {
namespace {

using Operands = std::span<const Value>;

// relu(x) = max(x, 0)
std::vector<Value> decompose_relu(Graph& g, const Node&, Operands in) {
  Value x = in[0];
  return {g.max(x, g.scalar_like(x, 0.0))};
}

// gelu(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
std::vector<Value> decompose_gelu(Graph& g, const Node&, Operands in) {
  Value x = in[0];
  Value cdf = g.add(g.scalar_like(x, 1.0), g.erf(g.div(x, g.scalar_like(x, std::numbers::sqrt2))));
  return {g.mul(g.mul(g.scalar_like(x, 0.5), x), cdf)};
}

// gelu_tanh(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
std::vector<Value> decompose_gelu_tanh(Graph& g, const Node&, Operands in) {
  Value x = in[0];
  Value x3 = g.mul(g.mul(x, x), x);
  Value inner = g.mul(g.scalar_like(x, std::sqrt(2.0 / std::numbers::pi)),
                      g.add(x, g.mul(g.scalar_like(x, 0.044715), x3)));
  Value cdf = g.add(g.scalar_like(x, 1.0), g.tanh(inner));
  return {g.mul(g.mul(g.scalar_like(x, 0.5), x), cdf)};
}

// silu(x) = x * logistic(x)
std::vector<Value> decompose_silu(Graph& g, const Node&, Operands in) {
  return {g.mul(in[0], g.logistic(in[0]))};
}

// softplus(x) = log1p(exp(-|x|)) + max(x, 0): exp never overflows, so ±100 stay finite.
std::vector<Value> decompose_softplus(Graph& g, const Node&, Operands in) {
  Value x = in[0];
  Value tail = g.log1p(g.exp(g.neg(g.abs(x))));
  return {g.add(tail, g.max(x, g.scalar_like(x, 0.0)))};
}

// leaky_relu(x) = x >= 0 ? x : alpha * x
std::vector<Value> decompose_leaky_relu(Graph& g, const Node& node, Operands in) {
  Value x = in[0];
  Value scaled = g.mul(g.scalar_like(x, node.attrs.get_float("alpha")), x);
  return {g.select(g.ge(x, g.scalar_like(x, 0.0)), x, scaled)};
}

// stop_gradient(x) = x: the op only marks a boundary for autodiff, so the forward computation
// is the operand itself and no kernel is ever needed.
std::vector<Value> decompose_stop_gradient(Graph&, const Node&, Operands in) { return {in[0]}; }

}  // namespace

void register_decompose_elementwise() {
  set_decomposition(OpKind::StopGradient, decompose_stop_gradient);
  set_decomposition(OpKind::Relu, decompose_relu);
  set_decomposition(OpKind::Gelu, decompose_gelu);
  set_decomposition(OpKind::GeluTanh, decompose_gelu_tanh);
  set_decomposition(OpKind::Silu, decompose_silu);
  set_decomposition(OpKind::Softplus, decompose_softplus);
  set_decomposition(OpKind::LeakyRelu, decompose_leaky_relu);
}

}  // namespace rlx::detail
