// Static memory planning: liveness over the node order, one arena with offset reuse, in-place
// elementwise and dynamic_update_slice results, zero-copy views, and inputs held as executable
// state (stored outside the arena, updated in place).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

/// Where one value of the graph lives. Liveness is in node indices of the graph (its node
/// order is the schedule): the value is written by node `first_use` and last read by node
/// `last_use`; a graph output has last_use = g.nodes().size(), one past the last node, because
/// the caller reads it after the run. Both ends are inclusive, so an operand and the result of
/// the node that last reads it are live at the same time (unless the result is in place).
struct BufferAssignment {
  Value value;
  int64_t offset = 0;  ///< bytes from the arena base; for a view of a leaf, from the leaf's data
  int64_t bytes = 0;   ///< exact size (numel * dtype size), not rounded up
  int64_t first_use = 0;
  int64_t last_use = 0;
  /// The value is a view: it owns no memory and reads the storage of `alias_of`.
  bool is_view = false;
  /// For a view, the value that owns the storage (the end of the view chain, never a view
  /// itself): an arena value, or an input/param/constant for a view outside the arena.
  Value alias_of;
  /// -1: the value lives in the arena (or is a view of a leaf). k >= 0: it lives in the storage
  /// of state k (MemoryPlan::state_inputs[k]), `offset` bytes from its start: the state input
  /// itself, a result written in place over it, or a view of either.
  int32_t state = -1;
};

/// The arena layout of one graph, produced by plan_memory.
struct MemoryPlan {
  /// One entry per result of every node except input/param/constant, in node order.
  std::vector<BufferAssignment> buffers;
  /// Arena size: the highest end offset of any buffer, each rounded up to `alignment`.
  int64_t arena_bytes = 0;
  /// What the arena would take without reuse: the sum of every non-view arena buffer's size,
  /// each rounded up to `alignment`. arena_bytes <= naive_bytes always holds.
  int64_t naive_bytes = 0;
  int64_t alignment = 64;
  /// Node ids of the inputs held as executable state (CompileOptions::state), in state order.
  /// Each has its own storage outside the arena, which the executable keeps between runs.
  std::vector<int32_t> state_inputs;
  /// A header line (arena, naive, alignment) and one line per buffer: value (node id and
  /// result index), offset, bytes, live range and, for a view, its source.
  std::string to_string() const;
};

/// Plans the memory of `g` executed in its node order.
///
/// - Arena: every result of a non-leaf node and of iota (computed at run time) gets a range of
///   one arena. Inputs and params are fed by the caller and constants are owned by the graph /
///   executable, so they are not in the arena.
/// - Liveness: a value is live from its node to its last reader (graph outputs to the end).
/// - Views own no memory and alias their source: reshape, squeeze, expand_dims, convert to the
///   operand's own dtype, and a slice whose result is one contiguous range of the operand
///   (stride 1 where it matters; every dim after the first partially sliced one is full and
///   every dim before it keeps one element), placed at the source's offset plus the range's
///   byte offset. A view keeps its source alive until the view's last use. A view of an
///   input/param/constant is a view outside the arena: `offset` counts from that leaf's data.
/// - In place: a result of an elementwise node (trait kElementwise) takes over the storage of
///   an operand that dies at this node when the operand has the result's element count and
///   element size and covers its whole storage (not an offset slice); each storage is taken by
///   at most one result. Elementwise kernels read element i of every operand before writing
///   element i of the results, so this is safe. Likewise the result of dynamic_update_slice
///   takes over the storage of its x (operand 0) when x dies at this node, covers that whole
///   storage and no other operand (update, start indices) reads it: the kernel then writes
///   only the update's elements, so a KV-cache write costs O(update), not O(cache). An x that
///   is an input, param or constant (or is read later) is copied first.
/// - State (`state_inputs`, node ids of input nodes, in state order): such an input is not fed
///   by the caller but lives in storage of its own that the executable keeps between runs
///   (CompileOptions::state). It is planned like an arena value whose slot is not placed in the
///   arena: results written in place over it (the in-place rules above: a
///   dynamic_update_slice of a KV cache writes only the update into the state's storage) and
///   views of them get BufferAssignment::state = its index and an offset into that storage.
/// - Offsets: "greedy by size" (TFLite GPU delegate, memory_management/
///   greedy_by_size_assignment.cc; Pisarchyk & Lee, "Efficient Memory Management for Deep
///   Neural Net Inference", 2020): buffers (an in-place chain counts as one) sorted by size,
///   largest first, each placed in the smallest gap between already placed buffers whose live
///   ranges intersect its own, or above them all. Sizes are rounded up to `alignment`, so every
///   non-view offset is a multiple of it.
///
/// Throws rlx::Error if `alignment` is not a power of two >= 64, if a value or the arena
/// would need more than 2^63 - 1 bytes (legal shapes can: f64[2^62]), or if a state node is
/// not an input node or is listed twice.
MemoryPlan plan_memory(const Graph& g, int64_t alignment = 64,
                       const std::vector<int32_t>& state_inputs = {});

/// Checks `plan` against `g` and returns one message per violation (empty when valid):
/// alignment below 64 or not a power of two; a value that needs a buffer but has none, or has
/// two; a buffer for a value that is not in the graph or is an input/param/constant; a wrong
/// size, view flag or view source; a live range that does not cover the value's real one
/// (recomputed from the graph); a non-view offset that is not aligned; a buffer outside the
/// arena (or a leaf view outside its leaf); a view not at its source's offset plus its byte
/// offset; and two buffers live at the same node whose byte ranges overlap, unless they share
/// storage (one is a view of the other, or both views of one value) or the later one is an
/// elementwise or dynamic_update_slice result written in place over an operand that dies at
/// that node (the in-place rule of plan_memory). Buffers in a state's storage
/// (plan.state_inputs) are checked the same way within that storage: the state input at offset
/// 0 of its own storage, every buffer inside it, no overlap of live buffers.
std::vector<std::string> validate_plan(const Graph& g, const MemoryPlan& plan);

}  // namespace rlx
