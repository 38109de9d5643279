// "dce": dead-code elimination by use counts, keeping the graph's inputs and params; unused
// results of cond (every branch's output) and unused ys of scan are dropped from the node and
// its bodies, and so are the dead carries of while_loop and scan.
#include <functional>

#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

/// An unused stand-in of `type` for a dropped value (zeros; the next sweep removes it).
Value placeholder(Graph& g, const TensorType& type) {
  return g.broadcast_in_dim(g.scalar(0, type.dtype), type.shape.dims(), {});
}

/// reached[i]: whether an output of `body` at a position in `outs` depends on body input i
/// (creation order).
std::vector<bool> inputs_reached(const Graph& body, const std::vector<size_t>& outs) {
  std::vector<bool> mark(body.nodes().size(), false);
  std::vector<int32_t> stack;
  for (size_t o : outs) stack.push_back(body.outputs()[o].node);
  while (!stack.empty()) {
    auto id = static_cast<size_t>(stack.back());
    stack.pop_back();
    if (mark[id]) continue;
    mark[id] = true;
    for (Value v : body.nodes()[id].operands) stack.push_back(v.node);
  }
  std::vector<int32_t> ins = body.inputs();
  std::vector<bool> reached(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) reached[i] = mark[static_cast<size_t>(ins[i])];
  return reached;
}

/// `body` without the inputs marked in `drop_input` and returning only the outputs marked in
/// `keep_output`: its nodes inlined into a fresh graph, a dropped input replaced by a
/// placeholder (the kept outputs must not depend on it; the body's own DCE removes it).
GraphRef without(const Graph& body, const std::vector<bool>& drop_input,
                 const std::vector<bool>& keep_output) {
  Graph nb(body.name());
  std::vector<Value> args;
  std::vector<int32_t> ins = body.inputs();
  for (size_t i = 0; i < ins.size(); ++i) {
    const Node& in = body.node(ins[i]);
    const TensorType& t = in.results[0];
    args.push_back(drop_input[i] ? placeholder(nb, t) : nb.input(in.name, t.dtype, t.shape));
  }
  std::vector<Value> res = inline_graph(nb, body, args), outs;
  for (size_t r = 0; r < res.size(); ++r)
    if (keep_output[r]) outs.push_back(res[r]);
  nb.set_outputs(std::move(outs));
  return std::make_shared<const Graph>(std::move(nb));
}

/// `mask` when it marks something to drop and some result of the node is used (else the trim
/// would change nothing, or the node is dead and the sweep removes it whole); else empty.
std::vector<bool> unless_noop(std::vector<bool> mask, const std::vector<int>& uses) {
  bool any = false, any_used = false;
  for (bool m : mask) any = any || m;
  for (int u : uses) any_used = any_used || u > 0;
  return any && any_used ? mask : std::vector<bool>{};
}

/// Which parts of node `n` (given its result use counts) a trim drops; empty: none.
using TrimMask = std::vector<bool> (*)(const Node& n, const std::vector<int>& uses);
/// Rebuilds node `n` (operands mapped) without the parts marked in `mask`; returns the values
/// replacing its results.
using TrimFn = std::function<std::vector<Value>(RewriteContext& ctx, const Node& n,
                                                std::span<const Value> operands,
                                                const std::vector<bool>& mask)>;

/// Rebuilds with `fn` every node of `g` for which `mask` is not empty; true when any was.
bool trim_nodes(Graph& g, TrimMask mask, const TrimFn& fn) {
  std::vector<std::vector<int>> uses = use_counts(g);
  bool any = false;
  for (size_t i = 0; i < g.nodes().size(); ++i) any = any || !mask(g.nodes()[i], uses[i]).empty();
  if (!any) return false;
  Graph out = rewrite(g,
                      [&](RewriteContext& ctx, const Node& n,
                          std::span<const Value> operands) -> std::optional<std::vector<Value>> {
                        std::vector<bool> m = mask(n, uses[static_cast<size_t>(ctx.id)]);
                        if (m.empty()) return std::nullopt;
                        return fn(ctx, n, operands, m);
                      });
  g = std::move(out);
  return true;
}

class DcePass : public Pass {
 public:
  std::string_view name() const override { return "dce"; }

  bool run(Graph& g) override {
    bool here = sweep(g);
    if (trim_unused_results(g)) {
      sweep(g);  // the placeholders of the dropped results
      here = true;
    }
    if (trim_dead_carries(g)) {
      sweep(g);
      here = true;
    }
    bool inside = run_in_bodies(*this, g);  // the bodies of cond / while_loop / scan
    return here || inside;
  }

 private:
  bool sweep(Graph& g) {
    const std::vector<Node>& nodes = g.nodes();
    // Walk backwards: a node none of whose results is used is dead, and its operands lose one
    // use each, so whole dead chains fall in one sweep.
    std::vector<std::vector<int>> uses = use_counts(g);
    std::vector<bool> live(nodes.size(), true);
    bool changed = false;
    for (size_t i = nodes.size(); i-- > 0;) {
      const Node& n = nodes[i];
      if (n.op == OpKind::Input || n.op == OpKind::Param) continue;
      bool used = false;
      for (int u : uses[i]) used = used || u > 0;
      if (used) continue;
      live[i] = false;
      changed = true;
      for (Value v : n.operands) --uses[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
    }
    if (!changed) return false;
    Graph out = rewrite(g, {}, &live);
    g = std::move(out);
    return true;
  }

  // Which results of control-flow node `n` can go: cond's unused results, scan's unused ys
  // (carries feed the next step and stay). Empty when none can (or the node is dead anyway).
  static std::vector<bool> droppable(const Node& n, const std::vector<int>& uses) {
    size_t first = 0;
    if (n.op == OpKind::Scan)
      first = static_cast<size_t>(n.attrs.get_int("num_carry"));
    else if (n.op != OpKind::Cond)
      return {};
    std::vector<bool> drop(n.results.size(), false);
    for (size_t r = 0; r < n.results.size(); ++r) drop[r] = r >= first && uses[r] == 0;
    return unless_noop(std::move(drop), uses);
  }

  // Rebuilds the control-flow nodes with droppable results without them (their bodies return
  // fewer values; the body's own DCE then removes what computed them). The dropped results are
  // replaced by unused placeholders that the next sweep removes.
  static bool trim_unused_results(Graph& g) {
    return trim_nodes(
        g, droppable,
        [](RewriteContext& ctx, const Node& n, std::span<const Value> operands,
           const std::vector<bool>& drop) {
          auto trimmed = [&](const GraphRef& body, size_t offset) {
            Graph b = *body;
            std::vector<Value> outs;
            for (size_t r = 0; r < b.outputs().size(); ++r)
              if (!drop[r + offset]) outs.push_back(b.outputs()[r]);
            b.set_outputs(std::move(outs));
            return GraphRef(std::make_shared<const Graph>(std::move(b)));
          };
          AttrMap attrs = n.attrs;
          if (n.op == OpKind::Scan) {
            attrs.set("body", trimmed(std::make_shared<const Graph>(n.attrs.get_graph("body")), 0));
          } else {
            GraphList branches;
            for (const GraphRef& b : n.attrs.get_graphs("branches"))
              branches.push_back(trimmed(b, 0));
            attrs.set("branches", std::move(branches));
          }
          Graph& dst = ctx.dst;
          std::vector<Value> kept =
              dst.emit(n.op, std::vector<Value>(operands.begin(), operands.end()), attrs, n.name);
          std::vector<Value> results;
          size_t k = 0;
          for (size_t r = 0; r < n.results.size(); ++r) {
            const TensorType& t = n.results[r];
            results.push_back(drop[r] ? placeholder(dst, t) : kept[k++]);
          }
          return results;
        });
  }

  // The carries of while_loop / scan node `n` that can go: live are those whose result is used
  // and, to a fixed point, those that a live carry's update, a scan's ys or a while's cond
  // depend on; every other carry (one feeding only itself or other dead carries) is dead.
  // Empty when none can (or the node is dead anyway).
  static std::vector<bool> dead_carries(const Node& n, const std::vector<int>& uses) {
    if (n.op != OpKind::WhileLoop && n.op != OpKind::Scan) return {};
    auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
    size_t k =
        n.op == OpKind::Scan ? static_cast<size_t>(n.attrs.get_int("num_carry")) : n.results.size();
    const Graph& body = n.attrs.get_graph("body");
    std::vector<bool> live(k, false);
    for (size_t c = 0; c < k; ++c) live[c] = uses[c] > 0;
    std::vector<size_t> roots;  // body outputs every iteration needs: the ys
    for (size_t o = k; o < body.outputs().size(); ++o) roots.push_back(o);
    std::vector<bool> cond_reached;
    if (n.op == OpKind::WhileLoop) cond_reached = inputs_reached(n.attrs.get_graph("cond"), {0});
    for (bool grew = true; grew;) {
      grew = false;
      std::vector<size_t> outs = roots;
      for (size_t c = 0; c < k; ++c)
        if (live[c]) outs.push_back(c);
      std::vector<bool> reached = inputs_reached(body, outs);
      for (size_t c = 0; c < k; ++c) {
        bool needed = reached[nc + c] || (!cond_reached.empty() && cond_reached[nc + c]);
        if (needed && !live[c]) live[c] = grew = true;
      }
    }
    std::vector<bool> dead(k);
    for (size_t c = 0; c < k; ++c) dead[c] = !live[c];
    return unless_noop(std::move(dead), uses);
  }

  // Rebuilds the while_loops and scans with dead carries without them: fewer init operands,
  // bodies (and a while's cond) without those inputs and (body) outputs. The dropped results
  // are replaced by unused placeholders that the next sweep removes.
  static bool trim_dead_carries(Graph& g) {
    return trim_nodes(
        g, dead_carries,
        [](RewriteContext& ctx, const Node& n, std::span<const Value> operands,
           const std::vector<bool>& dead) {
          auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
          size_t k = dead.size();
          // Operands / body inputs: consts, carries, xs; body outputs: carries, ys.
          std::vector<bool> drop_input(operands.size(), false), keep_output;
          std::vector<Value> ops;
          for (size_t i = 0; i < operands.size(); ++i) {
            drop_input[i] = i >= nc && i < nc + k && dead[i - nc];
            if (!drop_input[i]) ops.push_back(operands[i]);
          }
          const Graph& body = n.attrs.get_graph("body");
          for (size_t o = 0; o < body.outputs().size(); ++o)
            keep_output.push_back(o >= k || !dead[o]);
          AttrMap attrs = n.attrs;
          attrs.set("body", without(body, drop_input, keep_output));
          if (n.op == OpKind::WhileLoop) {
            attrs.set("cond", without(n.attrs.get_graph("cond"), drop_input, {true}));
          } else {
            int64_t kept_carries = 0;
            for (bool d : dead) kept_carries += d ? 0 : 1;
            attrs.set("num_carry", kept_carries);
          }
          Graph& dst = ctx.dst;
          std::vector<Value> kept = dst.emit(n.op, std::move(ops), attrs, n.name);
          std::vector<Value> results;
          size_t j = 0;
          for (size_t r = 0; r < n.results.size(); ++r)
            results.push_back(r < k && dead[r] ? placeholder(dst, n.results[r]) : kept[j++]);
          return results;
        });
  }
};

}  // namespace

std::unique_ptr<Pass> create_dce_pass() { return std::make_unique<DcePass>(); }

}  // namespace rlx
