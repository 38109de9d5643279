// Decompositions of the fused ops back into the ops they fuse: matmul + add + activation,
// add + layer_norm / rms_norm, packed_qkv_attention's reshape / slice / transpose / attention
// chain, and the region body inlined onto the operands.
#include <optional>
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

// qkv [B,S,(Hq+2Hkv)D] -> [B,S,Hq+2Hkv,D]; q, k, v are head slices transposed to
// [B,heads,S,D]; attention (same mask attributes and operand); back to [B,S,Hq D].
std::vector<Value> decompose_packed_qkv_attention(Graph& g, const Node& node,
                                                  std::span<const Value> ops) {
  const Shape qs = g.shape(ops[0]);  // a copy: the node list grows below
  const int64_t hq = node.attrs.get_int("heads");
  const int64_t hkv = node.attrs.has("kv_heads") ? node.attrs.get_int("kv_heads") : hq;
  const int64_t nb = qs[0], s = qs[1], d = qs[2] / (hq + 2 * hkv);
  Value x = g.reshape(ops[0], {nb, s, hq + 2 * hkv, d});
  auto heads = [&](int64_t h0, int64_t count) {
    return g.transpose(g.slice(x, {0, 0, h0, 0}, {nb, s, h0 + count, d}), {0, 2, 1, 3});
  };
  Graph::AttentionOptions o{node.attrs.get_string("mask"), std::nullopt,
                            node.attrs.get_int("window")};
  if (node.attrs.has("scale")) o.scale = node.attrs.get_float("scale");
  std::optional<Value> mask;
  if (ops.size() == 2) mask = ops[1];
  Value a = g.attention(heads(0, hq), heads(hq, hkv), heads(hq + hkv, hkv), o, mask);
  return {g.reshape(g.transpose(a, {0, 2, 1, 3}), {nb, s, hq * d})};
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
  set_decomposition(OpKind::PackedQkvAttention, decompose_packed_qkv_attention);
  set_decomposition(OpKind::ElementwiseRegion, decompose_elementwise_region);
}

}  // namespace detail
}  // namespace rlx
