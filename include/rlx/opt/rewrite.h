// Utilities passes share: rebuilding a graph node by node, and use counts.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

struct RewriteContext;

/// Called for each non-leaf node of the source graph in order, with the node and its operands
/// already mapped into `ctx.dst`. Return replacement values (one per result of `node`, with the
/// same types) after emitting whatever is needed into `ctx.dst`, or nullopt to copy the node as
/// is (with the mapped operands).
using RewriteFn = std::function<std::optional<std::vector<Value>>(
    RewriteContext& ctx, const Node& node, std::span<const Value> operands)>;

/// Called for each leaf (input or param) of the source graph in order. Return the value that
/// stands for it in `dst` (of the leaf's type) after adding the leaf and whatever is needed, e.g.
/// a param of another type and the ops that bring it back to the declared one, or nullopt to
/// copy the leaf as is.
using LeafFn = std::function<std::optional<Value>(Graph& dst, const Node& leaf)>;

/// Rebuilds `src` into a new graph: leaves keep their names and types (unless `leaf_fn` replaces
/// them), copied nodes keep their names where free, graph outputs are mapped. An empty `fn`
/// copies every node. When `live` is given, nodes with live[i] == false are dropped (they must
/// have no live user and not be a graph output; inputs and params are always kept). `src` is
/// unchanged. Throws rlx::Error if a replacement has the wrong count or types, or a dropped node
/// is still used (naming the node).
Graph rewrite(const Graph& src, const RewriteFn& fn, const std::vector<bool>* live = nullptr,
              const LeafFn& leaf_fn = {});

/// What a RewriteFn sees of the rebuild in progress.
struct RewriteContext {
  Graph& dst;      ///< the graph being built
  int32_t id = 0;  ///< id of the source node being visited

  /// The value in `dst` standing for source value `src` of an earlier node (after any
  /// replace_uses). Throws rlx::Error if that node was dropped.
  Value mapped(Value src) const;
  /// From now on, operands of later source nodes and graph outputs that read source value `src`
  /// (of an earlier node) read `replacement` (a value of `dst` with the same type) instead.
  void replace_uses(Value src, Value replacement);

 private:
  friend Graph rewrite(const Graph&, const RewriteFn&, const std::vector<bool>*, const LeafFn&);
  RewriteContext(Graph& d, const Graph& s, std::vector<std::vector<Value>>& m)
      : dst(d), src_(s), map_(m) {}
  const Graph& src_;
  std::vector<std::vector<Value>>& map_;
};

/// Number of uses of every value: result `uses[node][index]`, counting operand uses and graph
/// outputs (an output used twice counts twice).
std::vector<std::vector<int>> use_counts(const Graph& g);

}  // namespace rlx
