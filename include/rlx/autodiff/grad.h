// Reverse-mode automatic differentiation of rlx graphs: grad / value_and_grad / vjp, built as
// graph -> graph transforms (the result is an ordinary Graph that runs on any backend).
#pragma once

#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx::autodiff {

// Output names. Each transform names the outputs it adds after what they are, so executables
// report them meaningfully (Executable::outputs(), Python's exe.outputs): grad -> "loss",
// "grad_<w>" per wrt name; value_and_grad -> "grad_<w>"; vjp -> "vjp_<w>"; jvp -> "jvp_<i>",
// the tangent of output i; hvp -> "loss", "hvp_<w>". A forward output the builder only
// numbered is renamed "loss" (the loss) or "out_<i>"; one the user named keeps its name, and
// so does an input or param returned as is. A name already taken gets a suffix ("grad_w_1"),
// and a node that is two outputs at once keeps the first output's name.

/// Which loss a transform differentiates: graph output `output` (default 0), or, when `value`
/// is valid, that value of the graph (it need not be an output).
struct LossSpec {
  int output = 0;
  Value value{};
  LossSpec(int output_index = 0) : output(output_index) {}  // NOLINT: implicit from an index
  LossSpec(Value v) : value(v) {}                           // NOLINT: implicit from a value
};

/// Options of the reverse-mode transforms (grad, value_and_grad, vjp).
struct GradOptions {
  /// Checkpointing of `scan` (and of a bounded `while_loop`, differentiated as a scan): 0 (the
  /// default) stacks the carry of every step for the backward scan, O(length) carries; k >= 1
  /// stores only every k-th carry and recomputes the k steps in between inside the backward
  /// scan, O(length / k + k) carries for one forward pass more (jax.checkpoint of the scan
  /// body, segment-wise). The gradients are bitwise those of k = 0. When k does not divide the
  /// length, the length % k steps the forward runs last are differentiated unchecked; a scan
  /// with length <= k, or without a carry, is differentiated unchecked. k < 0 is an error.
  int64_t scan_checkpoint_every = 0;
};

/// jax.grad as a graph transform. Returns a new graph with the inputs and params of `g` whose
/// outputs are the loss, then d loss / d leaf for each name of `wrt` (in order), each with the
/// leaf's exact dtype and shape (f16/bf16 leaves are differentiated in their own dtype).
/// `wrt` names inputs or params of `g`. The loss must be a rank-0 float value.
/// Composite ops without a direct vjp rule are decomposed first (include/rlx/opt/decompose.h)
/// and their primitives differentiated; non-differentiable ops (comparisons, integer and bool
/// ops, argmax, top_k indices, iota, stop_gradient, floor/ceil/round/sign) contribute zero, as
/// in JAX. Values used several times accumulate their cotangents; numpy broadcasting is undone
/// by summing cotangents back to each operand's shape.
/// Throws rlx::Error (prefix "grad: ") for an unknown or duplicated `wrt` name, a non-float
/// leaf, an output index out of range, a value not in `g`, or a loss that is not a scalar
/// float (the message names its type, e.g. "f32[2,3]").
Graph grad(const Graph& g, const std::vector<std::string>& wrt, LossSpec loss = {},
           const GradOptions& options = {});

/// jax.value_and_grad, keeping every forward output: the result's outputs are all outputs of
/// `g` (in order, the loss among them when it is one) followed by one gradient per `wrt` name.
/// Same rules and errors as grad().
Graph value_and_grad(const Graph& g, const std::vector<std::string>& wrt, LossSpec loss = {},
                     const GradOptions& options = {});

/// jax.vjp for all outputs at once: the result has g's inputs and params plus one cotangent
/// input per output of `g`, named "ct.<i>" with that output's type, and outputs the outputs of
/// `g` followed by sum_i <ct_i, d out_i / d leaf> for each `wrt` name. Outputs that are not
/// float receive no cotangent input. Errors as grad() (no scalar requirement).
Graph vjp(const Graph& g, const std::vector<std::string>& wrt, const GradOptions& options = {});

/// jax.jvp as a graph transform: the result has g's inputs and params plus one tangent input
/// "tangent.<name>" (the leaf's type) per name of `primals`, and outputs g's outputs followed
/// by the tangent J t of each float output of `g` (in order; non-float outputs have none).
/// Forward mode is computed by transposition (JAX's linear_transpose): the vjp u -> J^T u is
/// linear in u, so its own vjp with cotangent t is J t. It therefore covers the ops the reverse
/// mode covers, at the cost of a forward plus two backward sweeps, plus a while_loop without
/// max_trip_count at the top level of `g` (no vjp): that loop is run again carrying the
/// tangents of its operands alongside (jax's while jvp rule). Errors as grad()
/// for the names (unknown, duplicated, non-float).
Graph jvp(const Graph& g, const std::vector<std::string>& primals);

/// Hessian-vector product, forward-over-reverse (jvp of grad): the result has g's inputs and
/// params plus "tangent.<name>" per `wrt` name, and outputs the loss, then (H v) for each `wrt`
/// leaf, H the Hessian of the loss over all `wrt` leaves and v the tangents. Same requirements
/// and errors as grad().
Graph hvp(const Graph& g, const std::vector<std::string>& wrt, LossSpec loss = {});

/// How the reverse-mode transform treats an op (the coverage test and docs/autodiff.md ask).
enum class VjpSupport {
  Leaf,               ///< input / param / constant / iota: no operands
  Rule,               ///< a direct vjp rule in the autodiff rule table
  Decomposition,      ///< composite without a rule: its decomposition is differentiated
  NonDifferentiable,  ///< contributes a zero cotangent (declared explicitly)
  Missing,            ///< none of the above: grad() through it throws
};
VjpSupport vjp_support(OpKind op);
/// "leaf", "rule", "decomposition", "non-differentiable" or "MISSING".
const char* vjp_support_name(VjpSupport s);

}  // namespace rlx::autodiff
