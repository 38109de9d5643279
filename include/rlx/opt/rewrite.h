// Utilities passes share: rebuilding a graph node by node, and use counts.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

/// Called for each non-leaf node of the source graph in order, with the node and its operands
/// already mapped into `dst`. Return replacement values (one per result of `node`, with the
/// same types) after emitting whatever is needed into `dst`, or nullopt to copy the node as is.
using RewriteFn = std::function<std::optional<std::vector<Value>>(Graph& dst, const Node& node,
                                                                  std::span<const Value> operands)>;

/// Rebuilds `src` into a new graph: leaves keep their names and types, copied nodes keep their
/// names where free, graph outputs are mapped. An empty `fn` copies every node. When `live` is
/// given, nodes with live[i] == false are dropped (they must have no live user and not be a
/// graph output; inputs and params are always kept). `src` is unchanged. Throws rlx::Error if a
/// replacement has the wrong count or types, or a dropped node is still used (naming the node).
Graph rewrite(const Graph& src, const RewriteFn& fn, const std::vector<bool>* live = nullptr);

/// Number of uses of every value: result `uses[node][index]`, counting operand uses and graph
/// outputs (an output used twice counts twice).
std::vector<std::vector<int>> use_counts(const Graph& g);

}  // namespace rlx
