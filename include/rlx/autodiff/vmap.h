// Vectorizing map of rlx graphs (jax.vmap) as a graph -> graph transform: per-op batching
// rules, with composite ops batched through their decomposition.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx::autodiff {

/// Where a value carries the mapped (batch) dimension: an axis index (negative counts from the
/// end of the batched shape, as in jax.vmap) or std::nullopt for "not batched".
using BatchAxis = std::optional<int64_t>;

/// jax.vmap as a graph transform. `g` is the per-example computation; the result computes it
/// for `batch_size` examples at once. Input i of `g` (in g.inputs() order) with in_axes[i] = a
/// becomes an input of the same name whose type has a dimension of size batch_size inserted
/// at axis a (a in [-(r+1), r] for the input's rank r); in_axes[i] = nullopt keeps the input as
/// it is (shared by every example). Params are unbatched unless listed in `param_axes`
/// (name -> axis, same convention). Output j of the result carries the batch at out_axes[j]
/// (empty out_axes: 0 for every output); an output that does not depend on a batched value is
/// broadcast along the batch (as jax does for an int out_axis); out_axes[j] = nullopt asks for
/// an unbatched output and requires output j not to depend on a batched value.
/// Semantics: result(x)[.., b at out_axis, ..] == g(x[.., b at in_axis, ..]) for every b
/// (exactly on the reference evaluator, up to reordered sums in dot_general / conv).
/// Because `g` has static per-example shapes, the batch size is one argument and batched
/// inputs cannot disagree on it; a fed tensor with another batch size is rejected by the
/// evaluator / Session as a type mismatch naming the input.
/// How: as JAX's batching interpreter, each value is tracked as batched (batch dim moved to
/// axis 0) or unbatched; each op has a batching rule (src/autodiff/vmap_rules_*.cc) that adjusts
/// attributes or folds the batch into an existing batch dimension; composites without a rule,
/// or whose rule declines an operand pattern, are batched through their decomposition.
/// Throws rlx::Error (prefix "vmap: ") when in_axes does not have one entry per input, an axis
/// is out of range (naming the leaf and its type), batch_size < 1, out_axes has the wrong
/// length or an axis out of range, out_axes[j] is nullopt for a batched output, or param_axes
/// names no param.
Graph vmap(const Graph& g, const std::vector<BatchAxis>& in_axes,
           const std::vector<BatchAxis>& out_axes, int64_t batch_size,
           const std::map<std::string, int64_t>& param_axes = {});

/// How vmap treats an op (the coverage test and docs/autodiff.md ask).
enum class BatchSupport {
  Leaf,           ///< input / param / constant / iota: batched by the driver, never by a rule
  Rule,           ///< a batching rule in the vmap rule table
  Decomposition,  ///< composite without a rule: its decomposition is batched
  Missing,        ///< none of the above: vmap through it throws
};
BatchSupport batch_support(OpKind op);
/// "leaf", "rule", "decomposition" or "MISSING".
const char* batch_support_name(BatchSupport s);

}  // namespace rlx::autodiff
