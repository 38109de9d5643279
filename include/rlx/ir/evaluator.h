// The reference evaluator: naive, obviously correct evaluation of any graph on host tensors.
// It is the oracle for every backend and pass. Floats are computed in double and rounded once
// to the result dtype; integer arithmetic wraps (two's complement) like XLA.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

/// Graph inputs and params by node name.
using TensorMap = std::map<std::string, Tensor>;

/// Evaluates `g` and returns its outputs in order. `feeds` must hold every input and param of
/// the graph with exactly the declared dtype and shape; otherwise throws rlx::Error naming the
/// input, the expected and the actual type. Feeds are not modified.
std::vector<Tensor> evaluate(const Graph& g, const TensorMap& feeds);

/// Evaluates `g` as the per-device program of an SPMD run over feeds.size() simulated devices
/// (feeds[d]: device d's inputs and params, each checked as evaluate() checks them). Nodes run
/// in order; an ordinary node runs on every device; a collective (all_reduce, all_gather,
/// reduce_scatter, all_to_all) combines the operands of the devices of each of its groups
/// (docs/ir.md "Collectives"). Returns the outputs of each device: result[d][i]. Throws
/// rlx::Error when a collective's replica_groups do not cover exactly devices 0..N-1. evaluate()
/// is the run over one device, where a collective is a group of one. Collectives inside the
/// bodies of cond / while_loop / scan are evaluated as evaluate() does (a group of one).
std::vector<std::vector<Tensor>> evaluate_spmd(const Graph& g, const std::vector<TensorMap>& feeds);

/// The results of collective node `n` (all_reduce, all_gather, reduce_scatter, all_to_all) for
/// the members of one group, in rank order, from their operands (xs[r]: the operand of the
/// member of rank r): evaluate_spmd's definition, which the CPU backend's collective kernels
/// also compute with.
std::vector<Tensor> evaluate_collective_group(const Node& n, const std::vector<Tensor>& xs);

/// Evaluates one node of kind `op` with `attrs` on operand tensors; result types are inferred.
/// Used by constant folding and op-level tests.
std::vector<Tensor> evaluate_op(OpKind op, const std::vector<Tensor>& operands,
                                const AttrMap& attrs = {});

/// True when the reference evaluator has a kernel for `op` (the coverage test asks this).
bool has_evaluator(OpKind op);

}  // namespace rlx
