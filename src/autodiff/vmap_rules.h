// Internal: the vmap batching-rule table, the context a rule sees, and shared helpers.
#pragma once

#include <optional>
#include <vector>

#include "rlx/autodiff/vmap.h"

namespace rlx::autodiff::vmap_detail {

/// A value of the batched graph and whether it carries the batch dimension, always at axis 0
/// (the canonical position every rule assumes; the driver moves input/output axes).
struct BVal {
  Value v;
  bool batched = false;
};

/// What a batching rule sees: the node of the source graph (a copy), its operands as values of
/// the batched graph `g`, and the batch size.
struct BatchContext {
  Graph& g;
  int64_t size;
  Node node;
  std::vector<BVal> in;

  /// Type of operand i without the batch dimension (as the source node saw it).
  TensorType unbatched_type(size_t i) const;
  /// Operand i with the batch at axis 0, broadcast along the batch when it has none.
  Value batched(size_t i);
  /// Emits node.op with `operands` and `attrs`; every result is batched.
  std::vector<BVal> emit_batched(std::vector<Value> operands, AttrMap attrs);
};

/// A rule returns the node's results (batched or not), or nullopt to decline an operand
/// pattern it does not handle; vmap then batches the node's decomposition instead.
using BatchFn = std::optional<std::vector<BVal>> (*)(BatchContext& ctx);

void set_batch_rule(OpKind op, BatchFn fn);
/// The rule of `op`, or nullptr.
BatchFn batch_rule(OpKind op);

// One per rule family file.
void register_batch_elementwise();
void register_batch_shape();
void register_batch_nn();
void register_batch_quant();
void register_batch_collective();
void register_batch_control_flow();
void register_batch_custom();

// ---- helpers
/// `v` (unbatched) broadcast to [size, v.shape...].
Value broadcast_batch(Graph& g, Value v, int64_t size);
/// Transposes `v` so that its dim `from` lands at position `to` (others keep their order).
Value move_axis(Graph& g, Value v, int from, int to);
/// `axis` (may be negative) normalized against an unbatched rank and shifted past the batch.
int64_t shift_axis(int64_t axis, int unbatched_rank);
/// Merges the batch (axis 0) into the next dim: [V, N, ...] -> [V*N, ...].
Value fold_batch(Graph& g, Value v);
/// Splits the leading dim back: [V*N, ...] -> [V, N, ...].
Value unfold_batch(Graph& g, Value v, int64_t size);

}  // namespace rlx::autodiff::vmap_detail
