// "dce": dead-code elimination by use counts, keeping the graph's inputs and params.
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

class DcePass : public Pass {
 public:
  std::string_view name() const override { return "dce"; }

  bool run(Graph& g) override {
    bool here = run_here(g);
    bool inside = run_in_bodies(*this, g);  // the bodies of cond / while_loop / scan
    return here || inside;
  }

 private:
  bool run_here(Graph& g) {
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
};

}  // namespace

std::unique_ptr<Pass> create_dce_pass() { return std::make_unique<DcePass>(); }

}  // namespace rlx
