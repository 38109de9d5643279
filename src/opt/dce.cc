// "dce": dead-code elimination by use counts, keeping the graph's inputs and params; unused
// results of cond (every branch's output) and unused ys of scan are dropped from the node and
// its bodies.
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

class DcePass : public Pass {
 public:
  std::string_view name() const override { return "dce"; }

  bool run(Graph& g) override {
    bool here = sweep(g);
    if (trim_unused_results(g)) {
      sweep(g);  // the placeholders of the dropped results
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
    bool any = false, any_used = false;
    for (size_t r = 0; r < n.results.size(); ++r) {
      any_used = any_used || uses[r] > 0;
      drop[r] = r >= first && uses[r] == 0;
      any = any || drop[r];
    }
    return any && any_used ? drop : std::vector<bool>{};
  }

  // Rebuilds the control-flow nodes with droppable results without them (their bodies return
  // fewer values; the body's own DCE then removes what computed them). The dropped results are
  // replaced by unused placeholders that the next sweep removes.
  bool trim_unused_results(Graph& g) {
    std::vector<std::vector<int>> uses = use_counts(g);
    bool any = false;
    for (size_t i = 0; i < g.nodes().size(); ++i)
      any = any || !droppable(g.nodes()[i], uses[i]).empty();
    if (!any) return false;
    Graph out = rewrite(
        g,
        [&](RewriteContext& ctx, const Node& n,
            std::span<const Value> operands) -> std::optional<std::vector<Value>> {
          std::vector<bool> drop = droppable(n, uses[static_cast<size_t>(ctx.id)]);
          if (drop.empty()) return std::nullopt;
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
            results.push_back(drop[r]
                                  ? dst.broadcast_in_dim(dst.scalar(0, t.dtype), t.shape.dims(), {})
                                  : kept[k++]);
          }
          return results;
        });
    g = std::move(out);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> create_dce_pass() { return std::make_unique<DcePass>(); }

}  // namespace rlx
