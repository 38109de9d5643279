// Decompositions of the fused ops back into the ops they fuse: matmul + add + activation,
// add + layer_norm / rms_norm, and the region body inlined onto the operands.
#include <span>
#include <string>
#include <vector>

#include "decompose.h"
#include "rlx/ir/error.h"

namespace rlx {

namespace detail {
namespace {

std::vector<Value> decompose_matmul_bias_act(Graph& g, const Node& node,
                                             std::span<const Value> ops) {
  return {apply_activation(g, g.add(g.matmul(ops[0], ops[1]), ops[2]),
                           node.attrs.get_string("activation"))};
}

std::vector<Value> decompose_residual_layer_norm(Graph& g, const Node& node,
                                                 std::span<const Value> ops) {
  Value h = g.add(ops[0], ops[1]);
  return {g.layer_norm(h, ops[2], ops[3], node.attrs.get_int("axis"), node.attrs.get_float("eps")),
          h};
}

std::vector<Value> decompose_residual_rms_norm(Graph& g, const Node& node,
                                               std::span<const Value> ops) {
  Value h = g.add(ops[0], ops[1]);
  return {g.rms_norm(h, ops[2], node.attrs.get_int("axis"), node.attrs.get_float("eps")), h};
}

// The region body inlined onto the operands.
std::vector<Value> decompose_elementwise_region(Graph& g, const Node& node,
                                                std::span<const Value> ops) {
  return inline_graph(g, node.attrs.get_graph("body"), ops);
}

}  // namespace

Value apply_activation(Graph& g, Value y, const std::string& act) {
  if (act == "relu") return g.relu(y);
  if (act == "gelu") return g.gelu(y);
  if (act == "gelu_tanh") return g.gelu_tanh(y);
  if (act == "silu") return g.silu(y);
  return y;  // "none"
}

void register_decompose_fused() {
  set_decomposition(OpKind::FusedMatMulBiasAct, decompose_matmul_bias_act);
  set_decomposition(OpKind::FusedResidualLayerNorm, decompose_residual_layer_norm);
  set_decomposition(OpKind::FusedResidualRmsNorm, decompose_residual_rms_norm);
  set_decomposition(OpKind::ElementwiseRegion, decompose_elementwise_region);
}

}  // namespace detail
}  // namespace rlx
