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

/// Emits the decomposition of one composite node (one level: the result may contain other
/// composites). Throws rlx::Error if `node.op` has no decomposition.
std::vector<Value> decompose_node(Graph& dst, const Node& node, std::span<const Value> operands);

/// Copies the nodes of `body` (a region or any graph without params) into `g`, its inputs (in
/// creation order) standing for `args` by position (values of `g` of the inputs' types), and
/// returns the values of body's outputs (how elementwise_region decomposes, and how autodiff
/// composes body transforms). Throws rlx::Error when the counts differ or a node does not type.
std::vector<Value> inline_graph(Graph& g, const Graph& body, std::span<const Value> args);

/// Returns a copy of `g` in which every composite op for which `keep(op)` is false (all, when
/// `keep` is empty) is replaced by its decomposition, recursively, until only primitives and
/// kept ops remain. Input and param names and graph outputs are preserved; `g` is unchanged.
Graph decompose(const Graph& g, const std::function<bool(OpKind)>& keep = {});

}  // namespace rlx
