// Decompositions of composite ops into primitives ("common IR" path for legalization, autodiff
// and backends without a native kernel).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

/// Emits into `dst` the primitive computation of composite `node` (from some source graph),
/// reading its operands from `operands` (values of `dst`, same types as node's operands).
/// Returns one value per result of `node`, with exactly the node's result types.
using DecomposeFn = std::vector<Value> (*)(Graph& dst, const Node& node,
                                           std::span<const Value> operands);

/// True when `op` has a registered decomposition (every op with trait kComposite must).
bool has_decomposition(OpKind op);

/// Emits the nodes of `body` (a self-contained region: inputs, constants and ops, no params)
/// into `dst`, body input i (in creation order) standing for args[i] (values of `dst` of the
/// same types); returns the values of body's outputs (how elementwise_region decomposes, and
/// how autodiff composes body transforms). Throws rlx::Error naming the body when it
/// holds a param or `args` has the wrong count.
std::vector<Value> inline_graph(Graph& dst, const Graph& body, std::span<const Value> args);

/// True when `node` can be decomposed: a composite op, or a custom_call whose custom op was
/// registered with a decomposition (rlx/ir/custom_op.h).
bool has_decomposition(const Node& node);

/// Emits the decomposition of one composite node or custom_call (one level: the result may
/// contain other composites). Throws rlx::Error naming the op and node if it has none.
std::vector<Value> decompose_node(Graph& dst, const Node& node, std::span<const Value> operands);

/// Returns a copy of `g` in which every composite op for which `keep(op)` is false (all, when
/// `keep` is empty) is replaced by its decomposition, recursively, until only primitives and
/// kept ops remain. Input and param names and graph outputs are preserved; `g` is unchanged.
Graph decompose(const Graph& g, const std::function<bool(OpKind)>& keep = {});
/// decompose() with a per-node choice: a node is kept when `keep(node)` is true (so one
/// custom_call may be kept and another expanded, by what its custom op defines).
Graph decompose_nodes(const Graph& g, const std::function<bool(const Node&)>& keep);

}  // namespace rlx
