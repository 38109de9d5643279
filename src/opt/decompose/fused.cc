// Decompositions of the fused ops back into the ops they fuse: matmul + add + activation,
// add + layer_norm / rms_norm, and the region body inlined onto the operands.
#include <span>
#include <string>
#include <vector>

#include "decompose.h"
#include "rlx/ir/error.h"

namespace rlx {

std::vector<Value> inline_graph(Graph& g, const Graph& body, std::span<const Value> args) {
  std::vector<int32_t> ins = body.inputs();
  check(ins.size() == args.size(), "inline_graph: graph @" + body.name() + " takes " +
                                       std::to_string(ins.size()) + " inputs, given " +
                                       std::to_string(args.size()));
  std::vector<std::vector<Value>> map(body.nodes().size());
  size_t next_input = 0;
  for (size_t i = 0; i < body.nodes().size(); ++i) {
    const Node& n = body.nodes()[i];
    if (n.op == OpKind::Input) {
      map[i] = {args[next_input++]};
      continue;
    }
    std::vector<Value> operands;
    for (Value v : n.operands)
      operands.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
    map[i] = g.emit(n.op, std::move(operands), n.attrs);
  }
  std::vector<Value> out;
  for (Value v : body.outputs())
    out.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
  return out;
}

namespace detail {
namespace {

std::vector<Value> decompose_matmul_bias_act(Graph& g, const Node& node,
                                             std::span<const Value> ops) {
  Value y = g.add(g.matmul(ops[0], ops[1]), ops[2]);
  const std::string& act = node.attrs.get_string("activation");
  if (act == "relu") return {g.relu(y)};
  if (act == "gelu") return {g.gelu(y)};
  if (act == "gelu_tanh") return {g.gelu_tanh(y)};
  if (act == "silu") return {g.silu(y)};
  return {y};  // "none"
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

void register_decompose_fused() {
  set_decomposition(OpKind::FusedMatMulBiasAct, decompose_matmul_bias_act);
  set_decomposition(OpKind::FusedResidualLayerNorm, decompose_residual_layer_norm);
  set_decomposition(OpKind::FusedResidualRmsNorm, decompose_residual_rms_norm);
  set_decomposition(OpKind::ElementwiseRegion, decompose_elementwise_region);
}

}  // namespace detail
}  // namespace rlx
