// Node-by-node graph rebuilding and use counting for passes.
#include "rlx/opt/rewrite.h"

#include "rlx/ir/error.h"

namespace rlx {

Value RewriteContext::mapped(Value src) const {
  check(src.node >= 0 && src.node < id, "rewrite: mapped() of a value of a later node");
  const auto& m = map_[static_cast<size_t>(src.node)];
  check(!m.empty(), "rewrite: node %" + src_.node(src).name + " was dropped but is still used");
  return m[static_cast<size_t>(src.index)];
}

void RewriteContext::replace_uses(Value src, Value replacement) {
  check(src.node >= 0 && src.node < id, "rewrite: replace_uses() of a value of a later node");
  auto& m = map_[static_cast<size_t>(src.node)];
  check(!m.empty(), "rewrite: node %" + src_.node(src).name + " was dropped but is replaced");
  check(dst.type(replacement) == src_.type(src),
        "rewrite: replacing a value of node %" + src_.node(src).name + " of type " +
            src_.type(src).to_string() + " with " + dst.type(replacement).to_string());
  m[static_cast<size_t>(src.index)] = replacement;
}

Graph rewrite(const Graph& src, const RewriteFn& fn, const std::vector<bool>* live,
              const LeafFn& leaf_fn) {
  Graph dst(src.name());
  std::vector<std::vector<Value>> map(src.nodes().size());
  RewriteContext ctx(dst, src, map);
  for (size_t i = 0; i < src.nodes().size(); ++i) {
    const Node& n = src.nodes()[i];
    ctx.id = static_cast<int32_t>(i);
    if (n.op == OpKind::Input || n.op == OpKind::Param) {
      std::optional<Value> v;
      if (leaf_fn) v = leaf_fn(dst, n);
      check(!v || dst.type(*v) == n.results[0],
            "rewrite of leaf %" + n.name + " replaced its type " + n.results[0].to_string() +
                " with " + (v ? dst.type(*v).to_string() : std::string()));
      map[i] = {v ? *v : dst.add_leaf(n.op, n.name, n.results[0])};
      continue;
    }
    if (live && !(*live)[i]) continue;
    std::vector<Value> operands;
    operands.reserve(n.operands.size());
    for (Value v : n.operands) operands.push_back(ctx.mapped(v));
    std::optional<std::vector<Value>> repl;
    if (fn) repl = fn(ctx, n, operands);
    if (!repl) {
      map[i] = dst.emit(n.op, std::move(operands), n.attrs, n.name);
      continue;
    }
    check(repl->size() == n.results.size(), "rewrite of node %" + n.name + " (op '" +
                                                std::string(op_name(n.op)) + "') returned " +
                                                std::to_string(repl->size()) + " values for " +
                                                std::to_string(n.results.size()) + " results");
    for (size_t r = 0; r < repl->size(); ++r)
      check(dst.type((*repl)[r]) == n.results[r],
            "rewrite of node %" + n.name + " (op '" + std::string(op_name(n.op)) +
                "') replaced result " + std::to_string(r) + " of type " + n.results[r].to_string() +
                " with " + dst.type((*repl)[r]).to_string());
    map[i] = std::move(*repl);
  }
  ctx.id = static_cast<int32_t>(src.nodes().size());
  std::vector<Value> outs;
  for (Value v : src.outputs()) outs.push_back(ctx.mapped(v));
  dst.set_outputs(std::move(outs));
  return dst;
}

std::vector<std::vector<int>> use_counts(const Graph& g) {
  std::vector<std::vector<int>> uses(g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) uses[i].assign(g.nodes()[i].results.size(), 0);
  auto use = [&](Value v) { ++uses[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]; };
  for (const Node& n : g.nodes())
    for (Value v : n.operands) use(v);
  for (Value v : g.outputs()) use(v);
  return uses;
}

}  // namespace rlx
