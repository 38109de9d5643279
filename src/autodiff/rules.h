// Internal: the vjp rule table, the context a rule sees, and helpers shared by rule families.
#pragma once

#include <optional>
#include <vector>

#include "rlx/autodiff/grad.h"

namespace rlx::autodiff::detail {

/// A forward pass a rule emitted that also computes every result of the node it transposes
/// (the scan rule's residual scan yields the scan's carry and ys as well): the transform then
/// redirects the node's uses to `values` (one per result, same types) and drops the node, so
/// the forward runs once.
struct Recomputed {
  int32_t node;
  std::vector<Value> values;
};

/// What a vjp rule sees: the node being transposed (a copy: emitting may move the node list),
/// its operands and results as values of `g`, the cotangent of each result (an invalid Value
/// when nothing flows into that result) and which operands need a cotangent.
struct VjpContext {
  Graph& g;
  Node node;
  std::vector<Value> operands;
  std::vector<Value> results;
  std::vector<Value> cts;
  std::vector<bool> wants;
  /// The transform's options (a rule that differentiates a body passes them on).
  GradOptions options{};
  /// Where a rule reports a Recomputed forward (null: the caller does not collect them).
  std::vector<Recomputed>* recomputed = nullptr;

  /// Cotangent of result i, materialized as zeros when none flows in.
  Value ct(size_t i = 0);
  /// Type of operand i / result i (copies: types refer into the growing node list).
  TensorType operand_type(size_t i) const { return g.type(operands[i]); }
  TensorType result_type(size_t i = 0) const { return g.type(results[i]); }
};

/// A rule returns one cotangent per operand with the operand's exact type, or an invalid
/// Value for an operand that receives nothing (not wanted, not float, or zero).
using VjpFn = std::vector<Value> (*)(VjpContext& ctx);

void set_vjp(OpKind op, VjpFn fn);
/// The rule of `op`, or nullptr.
VjpFn vjp_rule(OpKind op);
/// Ops declared non-differentiable (zero cotangent), one list in grad.cc.
bool is_non_differentiable(OpKind op);

// One per rule family file.
void register_vjp_elementwise();
void register_vjp_linalg();
void register_vjp_reduce();
void register_vjp_shape();
void register_vjp_nn();
void register_vjp_collective();
void register_vjp_control_flow();
void register_vjp_custom();

// ---- helpers
/// Zeros of `type`.
Value zeros(Graph& g, const TensorType& type);
/// Sums `ct` (numpy-broadcast result shape) back to `shape`: the leading dims it lacks and the
/// dims where `shape` has 1 and ct does not (the transpose of numpy broadcasting).
Value unbroadcast(Graph& g, Value ct, const Shape& shape);
/// Broadcasts `v` (of `shape` reduced over `axes`, keepdims or not) back to `shape`.
Value broadcast_back(Graph& g, Value v, const Shape& shape, const std::vector<int64_t>& axes);
/// Normalized, sorted axes of a reduction attribute against `rank`.
std::vector<int64_t> sorted_axes(const std::vector<int64_t>& axes, int rank);
/// The transpose of take_along_axis: scatters `ct` (result shape) into zeros of `x_shape`
/// at indices clamped to [0, n-1] along `axis`; `indices` has x's rank and broadcasts.
Value scatter_along_axis(Graph& g, Value ct, Value indices, const Shape& x_shape, int axis);

}  // namespace rlx::autodiff::detail
