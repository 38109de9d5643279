// Batching rules of shape and data-movement ops: attributes gain a leading batch entry; gather
// and scatter_add with batched indices fold the batch into the indexed axis (offset indices).
#include <numeric>

#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

std::vector<int64_t> prepend(int64_t first, std::vector<int64_t> v) {
  v.insert(v.begin(), first);
  return v;
}

int rank0(const BatchContext& ctx) { return ctx.unbatched_type(0).shape.rank(); }

// Axis attributes (one int or a list) shifted past the batch dim, normalized against `rank`.
AttrMap shifted(const BatchContext& ctx, const std::string& name, int rank) {
  AttrMap a = ctx.node.attrs;
  if (attr_type(a.get(name)) == AttrType::Int) {
    a.set(name, shift_axis(a.get_int(name), rank));
  } else {
    std::vector<int64_t> axes;
    for (int64_t x : a.get_ints(name)) axes.push_back(shift_axis(x, rank));
    a.set(name, axes);
  }
  return a;
}

std::optional<std::vector<BVal>> batch_reshape(BatchContext& ctx) {
  AttrMap a = ctx.node.attrs;
  a.set("shape", prepend(ctx.size, ctx.node.results[0].shape.dims()));  // -1 already resolved
  return ctx.emit_batched({ctx.in[0].v}, a);
}

std::optional<std::vector<BVal>> batch_transpose(BatchContext& ctx) {
  std::vector<int64_t> perm{0};
  for (int64_t p : ctx.node.attrs.get_ints("permutation")) perm.push_back(p + 1);
  AttrMap a = ctx.node.attrs;
  a.set("permutation", perm);
  return ctx.emit_batched({ctx.in[0].v}, a);
}

std::optional<std::vector<BVal>> batch_broadcast_in_dim(BatchContext& ctx) {
  std::vector<int64_t> dims{0};
  for (int64_t d : ctx.node.attrs.get_ints("broadcast_dimensions")) dims.push_back(d + 1);
  AttrMap a = ctx.node.attrs;
  a.set("shape", prepend(ctx.size, a.get_ints("shape")));
  a.set("broadcast_dimensions", dims);
  return ctx.emit_batched({ctx.in[0].v}, a);
}

// expand = broadcast to the (known) result shape, x's dims aligned to the trailing ones.
std::optional<std::vector<BVal>> batch_expand(BatchContext& ctx) {
  const Shape& out = ctx.node.results[0].shape;
  std::vector<int64_t> dims{0};
  for (int i = 0; i < rank0(ctx); ++i) dims.push_back(out.rank() - rank0(ctx) + i + 1);
  return std::vector<BVal>{
      {ctx.g.broadcast_in_dim(ctx.in[0].v, prepend(ctx.size, out.dims()), dims), true}};
}

std::optional<std::vector<BVal>> batch_slice(BatchContext& ctx) {
  AttrMap a = ctx.node.attrs;
  a.set("start", prepend(0, a.get_ints("start")));
  a.set("limit", prepend(ctx.size, a.get_ints("limit")));
  if (!a.get_ints("strides").empty()) a.set("strides", prepend(1, a.get_ints("strides")));
  return ctx.emit_batched({ctx.in[0].v}, a);
}

std::optional<std::vector<BVal>> batch_concatenate(BatchContext& ctx) {
  std::vector<Value> ops;
  for (size_t i = 0; i < ctx.in.size(); ++i) ops.push_back(ctx.batched(i));
  return ctx.emit_batched(ops, shifted(ctx, "dimension", rank0(ctx)));
}

// pad: no padding along the batch. A batched padding value (one per example) pads with 0 and
// then selects it where a padded all-true mask is false.
std::optional<std::vector<BVal>> batch_pad(BatchContext& ctx) {
  Graph& g = ctx.g;
  AttrMap a = ctx.node.attrs;
  a.set("low", prepend(0, a.get_ints("low")));
  a.set("high", prepend(0, a.get_ints("high")));
  if (!a.get_ints("interior").empty()) a.set("interior", prepend(0, a.get_ints("interior")));
  Value x = ctx.batched(0);
  if (!ctx.in[1].batched) return ctx.emit_batched({x, ctx.in[1].v}, a);
  const TensorType xt = ctx.unbatched_type(0);
  Value padded = g.emit1(OpKind::Pad, {x, g.scalar(0.0, xt.dtype)}, a);
  Value ones = g.broadcast_in_dim(g.scalar(1.0, DType::bool_), xt.shape.dims(), {});
  Value mask = g.emit1(OpKind::Pad, {ones, g.scalar(0.0, DType::bool_)}, ctx.node.attrs);
  const int r = g.shape(padded).rank();
  std::vector<int64_t> pv_shape(static_cast<size_t>(r), 1);
  pv_shape[0] = ctx.size;
  Value pv = g.reshape(ctx.in[1].v, pv_shape);
  return std::vector<BVal>{{g.select(mask, padded, pv), true}};
}

std::optional<std::vector<BVal>> batch_reverse(BatchContext& ctx) {
  return ctx.emit_batched({ctx.in[0].v}, shifted(ctx, "axes", rank0(ctx)));
}

std::optional<std::vector<BVal>> batch_squeeze(BatchContext& ctx) {
  return ctx.emit_batched({ctx.in[0].v}, shifted(ctx, "axes", rank0(ctx)));
}

std::optional<std::vector<BVal>> batch_expand_dims(BatchContext& ctx) {
  // expand_dims axes index the result.
  return ctx.emit_batched({ctx.in[0].v}, shifted(ctx, "axes", ctx.node.results[0].shape.rank()));
}

std::optional<std::vector<BVal>> batch_take_along_axis(BatchContext& ctx) {
  return ctx.emit_batched({ctx.batched(0), ctx.batched(1)}, shifted(ctx, "axis", rank0(ctx)));
}

// Batched indices [B, I...] into a batched x whose indexed axis was moved next to the batch
// and merged with it ([B*n, rest...]): example b's index i becomes b*n + i. `in_range` picks
// the index for positions outside [0, n) (gather clamps, scatter_add drops).
Value offset_indices(Graph& g, Value idx, int64_t n, int64_t size, bool clamp) {
  const DType it = g.dtype(idx);
  Value base = g.mul(g.iota(it, g.shape(idx), 0), g.scalar(static_cast<double>(n), it));
  if (clamp) {
    Value c = g.clamp(g.scalar(0.0, it), idx, g.scalar(static_cast<double>(n - 1), it));
    return g.add(c, base);
  }
  // scatter_add drops out-of-range updates: send them past the merged axis (size * n).
  Value ok =
      g.logical_and(g.ge(idx, g.scalar(0.0, it)), g.lt(idx, g.scalar(static_cast<double>(n), it)));
  return g.select(ok, g.add(idx, base), g.scalar(static_cast<double>(size * n), it));
}

// [B, d1.., dn, rest] with the indexed axis `ax` (batched numbering) moved to 1 and merged.
Value merge_indexed_axis(Graph& g, Value x, int ax) {
  return fold_batch(g, move_axis(g, x, ax, 1));
}

// Permutation taking [B, A(p dims), C(q dims), rest] to [B, C, A, rest] (or back, swapped).
std::vector<int64_t> swap_blocks(int p, int q, int rank) {
  std::vector<int64_t> perm{0};
  for (int i = 0; i < q; ++i) perm.push_back(1 + p + i);
  for (int i = 0; i < p; ++i) perm.push_back(1 + i);
  for (int i = 1 + p + q; i < rank; ++i) perm.push_back(i);
  return perm;
}

std::optional<std::vector<BVal>> batch_gather(BatchContext& ctx) {
  Graph& g = ctx.g;
  const int axis = ctx.unbatched_type(0).shape.normalize_axis(ctx.node.attrs.get_int("axis"));
  if (!ctx.in[1].batched) {
    AttrMap a = ctx.node.attrs;
    a.set("axis", int64_t{axis + 1});
    return ctx.emit_batched({ctx.in[0].v, ctx.in[1].v}, a);
  }
  if (!ctx.in[0].batched) {  // x.shape[:axis] + [B, I...] + rest: move the batch to the front
    Value r = g.gather(ctx.in[0].v, ctx.in[1].v, axis);
    return std::vector<BVal>{{move_axis(g, r, axis, 0), true}};
  }
  const int64_t n = ctx.unbatched_type(0).shape[axis];
  Value xm = merge_indexed_axis(g, ctx.in[0].v, axis + 1);  // [B*n, pre..., post...]
  Value idx = offset_indices(g, ctx.in[1].v, n, ctx.size, true);
  Value r = g.gather(xm, idx, 0);  // [B, I..., pre..., post...]
  const int q = ctx.unbatched_type(1).shape.rank();
  return std::vector<BVal>{
      {g.transpose(r, swap_blocks(q, axis, g.shape(r).rank())), true}};  // [B, pre, I, post]
}

std::optional<std::vector<BVal>> batch_scatter_add(BatchContext& ctx) {
  Graph& g = ctx.g;
  const int axis = ctx.unbatched_type(0).shape.normalize_axis(ctx.node.attrs.get_int("axis"));
  Value x = ctx.batched(0), upd = ctx.batched(2);
  if (!ctx.in[1].batched) {
    AttrMap a = ctx.node.attrs;
    a.set("axis", int64_t{axis + 1});
    return ctx.emit_batched({x, ctx.in[1].v, upd}, a);
  }
  const int64_t n = ctx.unbatched_type(0).shape[axis];
  const int q = ctx.unbatched_type(1).shape.rank();
  Value xm = merge_indexed_axis(g, x, axis + 1);  // [B*n, pre..., post...]
  Value idx = offset_indices(g, ctx.in[1].v, n, ctx.size, false);
  Value um = g.transpose(upd, swap_blocks(axis, q, g.shape(upd).rank()));  // [B, I, pre, post]
  Value r = g.scatter_add(xm, idx, um, 0);
  return std::vector<BVal>{{move_axis(g, unfold_batch(g, r, ctx.size), 1, axis + 1), true}};
}

// Example b of `v`: v itself when unbatched, else row b of its leading batch dim.
Value example(Graph& g, const BVal& v, int64_t b) {
  if (!v.batched) return v.v;
  std::vector<int64_t> dims = g.shape(v.v).dims(), start(dims.size(), 0), limit = dims;
  start[0] = b;
  limit[0] = b + 1;
  dims.erase(dims.begin());
  return g.reshape(g.slice(v.v, start, limit), dims);
}

bool any_batched(const BatchContext& ctx, size_t first) {
  for (size_t i = first; i < ctx.in.size(); ++i)
    if (ctx.in[i].batched) return true;
  return false;
}

// dynamic_slice / dynamic_update_slice (start indices from operand `first`). Shared starts: the
// op on the batched operands with a start of 0 and the whole batch along the new leading dim.
// Per-example starts (lax turns them into a gather / scatter): the op once per example on its
// row of every batched operand, the results stacked along a new leading dim; the graph grows
// by O(batch) nodes, which suits the small batches vmap sees here.
std::optional<std::vector<BVal>> batch_dynamic(BatchContext& ctx, size_t first) {
  Graph& g = ctx.g;
  if (!any_batched(ctx, first)) {
    std::vector<Value> ops;
    for (size_t i = 0; i < first; ++i) ops.push_back(ctx.batched(i));
    // The batch dim's start, in the starts' dtype (i32 for a rank-0 x, which has none).
    ops.push_back(g.scalar(0.0, ctx.in.size() > first ? g.dtype(ctx.in[first].v) : DType::i32));
    for (size_t i = first; i < ctx.in.size(); ++i) ops.push_back(ctx.in[i].v);
    AttrMap a = ctx.node.attrs;
    if (ctx.node.op == OpKind::DynamicSlice)
      a.set("slice_sizes", prepend(ctx.size, a.get_ints("slice_sizes")));
    return ctx.emit_batched(ops, a);
  }
  std::vector<Value> rows;
  for (int64_t b = 0; b < ctx.size; ++b) {
    std::vector<Value> ops;
    for (const BVal& v : ctx.in) ops.push_back(example(g, v, b));
    rows.push_back(g.expand_dims(g.emit1(ctx.node.op, ops, ctx.node.attrs), {0}));
  }
  return std::vector<BVal>{{g.concatenate(rows, 0), true}};
}

std::optional<std::vector<BVal>> batch_dynamic_slice(BatchContext& ctx) {
  return batch_dynamic(ctx, 1);
}

std::optional<std::vector<BVal>> batch_dynamic_update_slice(BatchContext& ctx) {
  return batch_dynamic(ctx, 2);
}

}  // namespace

void register_batch_shape() {
  set_batch_rule(OpKind::Reshape, batch_reshape);
  set_batch_rule(OpKind::Transpose, batch_transpose);
  set_batch_rule(OpKind::BroadcastInDim, batch_broadcast_in_dim);
  set_batch_rule(OpKind::Expand, batch_expand);
  set_batch_rule(OpKind::Slice, batch_slice);
  set_batch_rule(OpKind::Concatenate, batch_concatenate);
  set_batch_rule(OpKind::Pad, batch_pad);
  set_batch_rule(OpKind::Reverse, batch_reverse);
  set_batch_rule(OpKind::Squeeze, batch_squeeze);
  set_batch_rule(OpKind::ExpandDims, batch_expand_dims);
  set_batch_rule(OpKind::Gather, batch_gather);
  set_batch_rule(OpKind::TakeAlongAxis, batch_take_along_axis);
  set_batch_rule(OpKind::ScatterAdd, batch_scatter_add);
  set_batch_rule(OpKind::DynamicSlice, batch_dynamic_slice);
  set_batch_rule(OpKind::DynamicUpdateSlice, batch_dynamic_update_slice);
}

}  // namespace rlx::autodiff::vmap_detail
