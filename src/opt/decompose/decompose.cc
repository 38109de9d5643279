// Decomposition table and the recursive rewrite that expands composites.
#include "decompose.h"

#include <optional>

#include "rlx/ir/custom_op.h"
#include "rlx/ir/error.h"
#include "rlx/ir/op_table.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace detail {
namespace {
OpTable<DecomposeFn>& decompositions() {
  static OpTable<DecomposeFn> t("decomposition table", [](OpTable<DecomposeFn>&) {
    register_decompose_elementwise();
    register_decompose_linalg();
    register_decompose_reduce();
    register_decompose_shape();
    register_decompose_nn();
    register_decompose_conv();
    register_decompose_fused();
    register_decompose_quant();
    register_decompose_random();
  });
  return t;
}
}  // namespace

void set_decomposition(OpKind op, DecomposeFn fn) { decompositions().set(op, fn); }

}  // namespace detail

bool has_decomposition(OpKind op) { return detail::decompositions().contains(op); }

std::vector<Value> inline_graph(Graph& dst, const Graph& body, std::span<const Value> args) {
  check(body.inputs().size() == args.size(), "inline_graph: graph @" + body.name() + " has " +
                                                 std::to_string(body.inputs().size()) +
                                                 " inputs, given " + std::to_string(args.size()));
  std::vector<std::vector<Value>> map(body.nodes().size());
  size_t next_input = 0;
  for (size_t i = 0; i < body.nodes().size(); ++i) {
    const Node& n = body.nodes()[i];
    if (n.op == OpKind::Input) {
      map[i] = {args[next_input++]};
      continue;
    }
    check(n.op != OpKind::Param, "inline_graph: graph @" + body.name() + " holds param %" + n.name);
    std::vector<Value> operands;
    for (Value v : n.operands)
      operands.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
    map[i] = dst.emit(n.op, std::move(operands), n.attrs);
  }
  std::vector<Value> out;
  for (Value v : body.outputs())
    out.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
  return out;
}

bool has_decomposition(const Node& node) {
  if (node.op == OpKind::CustomCall) return static_cast<bool>(custom_op_of(node).decompose);
  return op_info(node.op).has(kComposite) && has_decomposition(node.op);
}

std::vector<Value> decompose_node(Graph& dst, const Node& node, std::span<const Value> operands) {
  std::vector<Value> out;
  if (node.op == OpKind::CustomCall) {
    const CustomOpDef& def = custom_op_of(node);
    check(static_cast<bool>(def.decompose),
          "custom op '" + def.name + "' (node %" + node.name + ") has no decomposition");
    out = def.decompose(dst, node, operands);
  } else {
    const DecomposeFn* fn = detail::decompositions().find(node.op);
    check(fn != nullptr, "op '" + std::string(op_name(node.op)) + "' (node %" + node.name +
                             ") has no decomposition");
    out = (*fn)(dst, node, operands);
  }
  check(out.size() == node.results.size(), "decomposition of '" + std::string(op_name(node.op)) +
                                               "' returned " + std::to_string(out.size()) +
                                               " values for " +
                                               std::to_string(node.results.size()) + " results");
  for (size_t i = 0; i < out.size(); ++i)
    check(dst.type(out[i]) == node.results[i],
          "decomposition of '" + std::string(op_name(node.op)) + "' (node %" + node.name +
              ") produced " + dst.type(out[i]).to_string() + " for result " + std::to_string(i) +
              ", expected " + node.results[i].to_string());
  return out;
}

namespace {

// The decomposition of `node` (operands already in dst) when it is a composite that is not
// kept, or nullopt to copy it. Recursion expands composites the decomposition itself emits.
std::optional<std::vector<Value>> expand(Graph& dst, const Node& node,
                                         std::span<const Value> operands,
                                         const std::function<bool(const Node&)>& keep) {
  if (!has_decomposition(node) || (keep && keep(node))) return std::nullopt;
  // Decompose into a scratch graph whose leaves stand for the operands, then copy that graph's
  // nodes into dst under fresh names, expanding them in turn.
  Graph scratch("decompose");
  std::vector<Value> leaves;
  for (size_t i = 0; i < operands.size(); ++i)
    leaves.push_back(scratch.input("operand" + std::to_string(i), dst.type(operands[i]).dtype,
                                   dst.type(operands[i]).shape));
  std::vector<Value> results = decompose_node(scratch, node, leaves);
  std::vector<std::vector<Value>> map(scratch.nodes().size());
  for (size_t i = 0; i < operands.size(); ++i)
    map[static_cast<size_t>(leaves[i].node)] = {operands[i]};
  for (size_t i = 0; i < scratch.nodes().size(); ++i) {
    const Node& n = scratch.nodes()[i];
    if (n.op == OpKind::Input) continue;
    std::vector<Value> ops;
    for (Value v : n.operands)
      ops.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
    std::optional<std::vector<Value>> sub = expand(dst, n, ops, keep);
    map[i] = sub ? std::move(*sub) : dst.emit(n.op, std::move(ops), n.attrs);
  }
  std::vector<Value> out;
  for (Value v : results)
    out.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
  return out;
}

}  // namespace

Graph decompose_nodes(const Graph& g, const std::function<bool(const Node&)>& keep) {
  return rewrite(g, [&](RewriteContext& ctx, const Node& n, std::span<const Value> operands) {
    return expand(ctx.dst, n, operands, keep);
  });
}

Graph decompose(const Graph& g, const std::function<bool(OpKind)>& keep) {
  if (!keep) return decompose_nodes(g, {});
  return decompose_nodes(g, [&](const Node& n) { return keep(n.op); });
}

}  // namespace rlx
