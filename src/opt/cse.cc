// "cse": common-subexpression elimination over one rewrite() walk, keyed by op, operands and
// attributes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

size_t mix(size_t seed, size_t v) {
  return seed ^ (v + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2));
}

// A hash consistent with AttrMap::operator==: equal maps hash equal. It is cheap rather than
// exact — tensors hash their type and first bytes, nested graphs only their presence — because
// candidates are then compared exactly.
size_t hash_attrs(const AttrMap& attrs) {
  size_t h = 0;
  for (const auto& [name, value] : attrs.entries()) {
    h = mix(h, std::hash<std::string>{}(name));
    h = mix(h, value.index());
    if (auto* i = std::get_if<int64_t>(&value)) {
      h = mix(h, std::hash<int64_t>{}(*i));
    } else if (auto* d = std::get_if<double>(&value)) {
      // operator== treats 0.0 == -0.0 and every NaN as equal, so those hash alike.
      h = std::isnan(*d) ? mix(h, 1) : mix(h, std::hash<double>{}(*d == 0 ? 0.0 : *d));
    } else if (auto* b = std::get_if<bool>(&value)) {
      h = mix(h, *b ? 1 : 2);
    } else if (auto* s = std::get_if<std::string>(&value)) {
      h = mix(h, std::hash<std::string>{}(*s));
    } else if (auto* ints = std::get_if<std::vector<int64_t>>(&value)) {
      for (int64_t i : *ints) h = mix(h, std::hash<int64_t>{}(i));
    } else if (auto* dt = std::get_if<DType>(&value)) {
      h = mix(h, static_cast<size_t>(*dt));
    } else if (auto* t = std::get_if<Tensor>(&value)) {
      h = mix(h, static_cast<size_t>(t->dtype()));
      for (int64_t dim : t->shape().dims()) h = mix(h, std::hash<int64_t>{}(dim));
      uint64_t head = 0;
      std::memcpy(&head, t->data(), std::min(t->nbytes(), sizeof head));
      h = mix(h, std::hash<uint64_t>{}(head));
    }
  }
  return h;
}

// One computed expression: the source node (for its op and attributes) and its operands and
// results in the rebuilt graph.
struct Expr {
  const Node* node;
  std::vector<Value> operands;
  std::vector<Value> results;
};

class CsePass : public Pass {
 public:
  std::string_view name() const override { return "cse"; }

  bool run(Graph& g) override {
    bool here = run_here(g);
    bool inside = run_in_bodies(*this, g);  // the bodies of cond / while_loop / scan
    return here || inside;
  }

 private:
  bool run_here(Graph& g) {
    std::unordered_multimap<size_t, Expr> seen;
    bool changed = false;
    Graph out =
        rewrite(g,
                [&](RewriteContext& ctx, const Node& n,
                    std::span<const Value> operands) -> std::optional<std::vector<Value>> {
                  Graph& dst = ctx.dst;
                  std::vector<Value> key(operands.begin(), operands.end());
                  // Commutative ops are keyed by their operands in a canonical order.
                  if (op_info(n.op).has(kCommutative))
                    std::sort(key.begin(), key.end(), [](Value a, Value b) {
                      return a.node != b.node ? a.node < b.node : a.index < b.index;
                    });
                  size_t h = mix(static_cast<size_t>(n.op), hash_attrs(n.attrs));
                  for (Value v : key)
                    h = mix(mix(h, static_cast<size_t>(v.node)), static_cast<size_t>(v.index));
                  auto [first, last] = seen.equal_range(h);
                  for (auto it = first; it != last; ++it) {
                    const Expr& e = it->second;
                    if (e.node->op == n.op && e.operands == key && e.node->attrs == n.attrs) {
                      changed = true;
                      return e.results;
                    }
                  }
                  std::vector<Value> results = dst.emit(
                      n.op, std::vector<Value>(operands.begin(), operands.end()), n.attrs, n.name);
                  seen.emplace(h, Expr{&n, std::move(key), results});
                  return results;
                });
    if (changed) g = std::move(out);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> create_cse_pass() { return std::make_unique<CsePass>(); }

}  // namespace rlx
