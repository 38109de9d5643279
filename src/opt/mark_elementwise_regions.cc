// The "mark-elementwise-regions" pass: groups of connected elementwise ops become one
// elementwise_region node each, whose body graph holds the group.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

using Key = std::pair<int32_t, int32_t>;
Key key(Value v) { return {v.node, v.index}; }

// Union-find over node ids; each set is one group.
struct Groups {
  std::vector<int32_t> parent;
  explicit Groups(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int32_t find(int32_t x) {
    while (parent[static_cast<size_t>(x)] != x)
      x = parent[static_cast<size_t>(x)] =
          parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  }
};

// One region to build: its members (source ids, ascending) and the constants pulled into it.
struct Region {
  std::vector<int32_t> members;
  std::vector<int32_t> constants;
};

// Nodes whose results reach a graph output; dead nodes (e.g. left by a fusion) are not grouped,
// so running the pass twice changes nothing the second time.
std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live(g.nodes().size(), false);
  for (Value v : g.outputs()) live[static_cast<size_t>(v.node)] = true;
  for (size_t i = g.nodes().size(); i-- > 0;)
    if (live[i])
      for (Value v : g.nodes()[i].operands) live[static_cast<size_t>(v.node)] = true;
  return live;
}

// Greedy grouping in node order. A live elementwise op (any op with trait kElementwise, convert
// included, except elementwise_region itself: bodies do not nest) joins the open groups of its
// operands whose ops have its result shape, so a region is one loop over one iteration space
// (operands from outside may still broadcast into it). Any other use of a group's value closes
// that group: nothing joins it afterwards. Hence every use from outside comes after the group's
// last node, where the region is emitted, and no path leaves the group and re-enters it.
// Groups of two or more ops become regions; a constant all of whose uses are in one region is
// copied into its body.
std::map<int32_t, Region> find_regions(const Graph& g) {
  const std::vector<Node>& nodes = g.nodes();
  std::vector<bool> live = live_nodes(g);
  Groups groups(nodes.size());
  std::vector<bool> member(nodes.size(), false), open(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    bool candidate =
        live[i] && op_info(n.op).has(kElementwise) && n.op != OpKind::ElementwiseRegion;
    std::vector<int32_t> join;
    for (Value v : n.operands) {
      if (!member[static_cast<size_t>(v.node)]) continue;
      int32_t root = groups.find(v.node);
      if (!open[static_cast<size_t>(root)]) continue;
      if (candidate && g.shape(v) == n.results[0].shape)
        join.push_back(root);
      else
        open[static_cast<size_t>(root)] = false;
    }
    if (!candidate) continue;
    member[i] = true;
    open[i] = true;
    // Every value of a group has the group's shape, so no group is both joined and closed here.
    for (int32_t root : join)
      groups.parent[static_cast<size_t>(groups.find(root))] = static_cast<int32_t>(i);
  }
  std::map<int32_t, Region> by_root;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (member[i])
      by_root[groups.find(static_cast<int32_t>(i))].members.push_back(static_cast<int32_t>(i));
  std::map<int32_t, Region> regions;  // keyed by the last member
  std::vector<int32_t> region_of(nodes.size(), -1);
  for (auto& [root, r] : by_root) {
    if (r.members.size() < 2) continue;
    for (int32_t m : r.members) region_of[static_cast<size_t>(m)] = r.members.back();
    regions[r.members.back()] = std::move(r);
  }
  // Constants used only inside one region.
  std::vector<int32_t> const_region(nodes.size(), -2);  // -2: unused so far, -1: not pullable
  for (size_t i = 0; i < nodes.size(); ++i)
    for (Value v : nodes[i].operands) {
      auto c = static_cast<size_t>(v.node);
      if (nodes[c].op != OpKind::Constant) continue;
      int32_t r = region_of[i];
      const_region[c] = (r >= 0 && (const_region[c] == -2 || const_region[c] == r)) ? r : -1;
    }
  for (Value v : g.outputs()) const_region[static_cast<size_t>(v.node)] = -1;
  for (size_t c = 0; c < nodes.size(); ++c)
    if (const_region[c] >= 0) regions[const_region[c]].constants.push_back(static_cast<int32_t>(c));
  return regions;
}

// Name for a body input standing for `v`, unique among the body's names.
std::string input_name(const Graph& src, const Graph& body, Value v) {
  std::string base = src.node(v).name;
  if (v.index > 0) base += "." + std::to_string(v.index);
  std::string name = base;
  for (int k = 1; body.find(name) >= 0; ++k) name = base + "_" + std::to_string(k);
  return name;
}

class MarkElementwiseRegionsPass : public Pass {
 public:
  std::string_view name() const override { return "mark-elementwise-regions"; }

  bool run(Graph& g) override {
    std::map<int32_t, Region> regions = find_regions(g);
    if (regions.empty()) return false;
    std::vector<int32_t> region_of(g.nodes().size(), -1);
    for (const auto& [last, r] : regions)
      for (int32_t m : r.members) region_of[static_cast<size_t>(m)] = last;
    // Members before the last are copied as they are; the last one emits the region.
    auto fuse = [&](RewriteContext& ctx, const Node&,
                    std::span<const Value> operands) -> std::optional<std::vector<Value>> {
      if (region_of[static_cast<size_t>(ctx.id)] != ctx.id) return std::nullopt;
      return build_region(g, ctx, regions.at(ctx.id), operands);
    };
    g = rewrite(g, fuse);
    return true;
  }

 private:
  // Emits the region of `r` into ctx.dst at its last member, whose mapped operands are
  // `last_ops`; redirects later uses of the other members' results to the region's results and
  // returns the last member's value.
  static std::vector<Value> build_region(const Graph& g, RewriteContext& ctx, const Region& r,
                                         std::span<const Value> last_ops) {
    int32_t last = r.members.back();
    std::vector<bool> inside(g.nodes().size(), false);
    for (int32_t m : r.members) inside[static_cast<size_t>(m)] = true;
    for (int32_t c : r.constants) inside[static_cast<size_t>(c)] = true;

    Graph body("body");
    std::map<Key, Value> in_body;  // source value -> body value
    std::vector<Value> region_ops;
    // Inputs: external operands in first-use order.
    for (int32_t m : r.members) {
      const Node& n = g.node(m);
      for (size_t j = 0; j < n.operands.size(); ++j) {
        Value v = n.operands[j];
        if (inside[static_cast<size_t>(v.node)] || in_body.count(key(v))) continue;
        in_body[key(v)] = body.add_leaf(OpKind::Input, input_name(g, body, v), g.type(v));
        region_ops.push_back(m == last ? last_ops[j]
                                       : ctx.dst.node(ctx.mapped(Value{m, 0})).operands[j]);
      }
    }
    // Constants and members in source order.
    std::vector<int32_t> body_nodes = r.members;
    body_nodes.insert(body_nodes.end(), r.constants.begin(), r.constants.end());
    std::sort(body_nodes.begin(), body_nodes.end());
    for (int32_t id : body_nodes) {
      const Node& n = g.node(id);
      std::vector<Value> ops;
      for (Value v : n.operands) ops.push_back(in_body.at(key(v)));
      in_body[{id, 0}] = body.emit1(n.op, std::move(ops), n.attrs, n.name);
    }
    // Outputs: members used outside the region (the last one always is, being live and last).
    std::vector<std::vector<int>> uses = use_counts(g);
    std::vector<int> inner_uses(g.nodes().size(), 0);
    for (int32_t m : r.members)
      for (Value v : g.node(m).operands) ++inner_uses[static_cast<size_t>(v.node)];
    std::vector<int32_t> exported;
    for (int32_t m : r.members)
      if (uses[static_cast<size_t>(m)][0] > inner_uses[static_cast<size_t>(m)])
        exported.push_back(m);
    std::vector<Value> body_outs;
    for (int32_t m : exported) body_outs.push_back(in_body.at({m, 0}));
    body.set_outputs(std::move(body_outs));

    std::vector<Value> res =
        ctx.dst.emit(OpKind::ElementwiseRegion, std::move(region_ops),
                     {{"body", std::make_shared<const Graph>(std::move(body))}}, g.node(last).name);
    Value last_value;
    for (size_t k = 0; k < exported.size(); ++k) {
      if (exported[k] == last)
        last_value = res[k];
      else
        ctx.replace_uses(Value{exported[k], 0}, res[k]);
    }
    return {last_value};
  }
};

}  // namespace

std::unique_ptr<Pass> create_mark_elementwise_regions_pass() {
  return std::make_unique<MarkElementwiseRegionsPass>();
}

}  // namespace rlx
