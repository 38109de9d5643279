// vjp rules of the data-movement ops: each cotangent is the inverse movement of ct (reshape,
// transpose, sums for broadcasts, pads for slices, scatters for gathers and vice versa).
#include <algorithm>

#include "rules.h"

namespace rlx::autodiff::detail {
namespace {

using C = VjpContext;
using Grads = std::vector<Value>;
using Ints = std::vector<int64_t>;

// reshape, squeeze and expand_dims: ct reshaped to the operand's shape.
Grads vjp_reshape(C& c) { return {c.g.reshape(c.ct(), c.operand_type(0).shape.dims())}; }

// expand (numpy broadcast_to): ct summed back to the operand's shape.
Grads vjp_expand(C& c) { return {unbroadcast(c.g, c.ct(), c.operand_type(0).shape)}; }

// transpose by the inverse permutation.
Grads vjp_transpose(C& c) {
  const Ints& p = c.node.attrs.get_ints("permutation");
  Ints inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return {c.g.transpose(c.ct(), inv)};
}

// broadcast_in_dim: sum over the new dims and over operand dims of size 1 that were widened
// (keepdims), bring the operand's dims into its order, then reshape to its shape.
Grads vjp_broadcast_in_dim(C& c) {
  Graph& g = c.g;
  Shape xs = c.operand_type(0).shape, out = c.result_type().shape;
  const Ints& dims = c.node.attrs.get_ints("broadcast_dimensions");
  Ints axes;
  for (int64_t d = 0; d < out.rank(); ++d) {
    auto it = std::find(dims.begin(), dims.end(), d);
    if (it == dims.end() ||
        (xs[static_cast<int>(it - dims.begin())] == 1 && out[static_cast<int>(d)] != 1))
      axes.push_back(d);
  }
  Value s = axes.empty() ? c.ct() : g.reduce_sum(c.ct(), axes, true);
  if (!std::is_sorted(dims.begin(), dims.end())) {
    Ints perm = dims;
    for (int64_t d = 0; d < out.rank(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
    s = g.transpose(s, perm);
  }
  return {g.reshape(s, xs.dims())};
}

// slice: ct padded back into place, with interior padding stride - 1.
Grads vjp_slice(C& c) {
  Graph& g = c.g;
  Shape xs = c.operand_type(0).shape, out = c.result_type().shape;
  DType dt = c.operand_type(0).dtype;
  if (out.numel() == 0) return {zeros(g, c.operand_type(0))};
  const AttrMap& a = c.node.attrs;
  Ints start = a.get_ints("start"), strides = a.get_ints("strides");
  if (strides.empty()) strides.assign(static_cast<size_t>(xs.rank()), 1);
  Ints high, interior;
  for (int i = 0; i < xs.rank(); ++i) {
    int64_t s = strides[static_cast<size_t>(i)];
    int64_t last = start[static_cast<size_t>(i)] + (out[i] - 1) * s;
    high.push_back(xs[i] - last - 1);
    interior.push_back(s - 1);
  }
  return {g.pad(c.ct(), g.scalar(0, dt), start, high, interior)};
}

// concatenate: each operand gets its slice of ct.
Grads vjp_concatenate(C& c) {
  Graph& g = c.g;
  Shape out = c.result_type().shape;
  int axis = out.normalize_axis(c.node.attrs.get_int("dimension"));
  Grads grads(c.operands.size());
  int64_t offset = 0;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    Shape s = c.operand_type(i).shape;
    if (c.wants[i]) {
      Ints lo(static_cast<size_t>(out.rank()), 0), hi = out.dims();
      lo[static_cast<size_t>(axis)] = offset;
      hi[static_cast<size_t>(axis)] = offset + s[axis];
      grads[i] = g.slice(c.ct(), lo, hi);
    }
    offset += s[axis];
  }
  return grads;
}

// pad: undo the edge padding with the negated pads (cropping where they were positive), then
// take every (interior + 1)-th element; the padding value gets everything else (lax's rule).
Grads vjp_pad(C& c) {
  Graph& g = c.g;
  const AttrMap& a = c.node.attrs;
  TensorType xt = c.operand_type(0);
  Ints low = a.get_ints("low"), high = a.get_ints("high"), interior = a.get_ints("interior");
  if (interior.empty()) interior.assign(static_cast<size_t>(xt.shape.rank()), 0);
  Ints nlow, nhigh, step;
  for (size_t i = 0; i < low.size(); ++i) {
    nlow.push_back(-low[i]);
    nhigh.push_back(-high[i]);
    step.push_back(interior[i] + 1);
  }
  Value dx;
  if (xt.shape.numel() == 0) {
    dx = zeros(g, xt);
  } else {
    Value unpadded = g.pad(c.ct(), g.scalar(0, xt.dtype), nlow, nhigh);
    dx = g.slice(unpadded, Ints(low.size(), 0), g.shape(unpadded).dims(), step);
  }
  Grads out(2);
  if (c.wants[0]) out[0] = dx;
  if (c.wants[1]) {
    Ints all_ct;
    for (int i = 0; i < xt.shape.rank(); ++i) all_ct.push_back(i);
    out[1] = g.sub(g.reduce_sum(c.ct(), all_ct), g.reduce_sum(dx, all_ct));
  }
  return out;
}

Grads vjp_reverse(C& c) { return {c.g.reverse(c.ct(), c.node.attrs.get_ints("axes"))}; }

// Indices clamped into [0, n-1], as gather and take_along_axis read them.
Value clamped(Graph& g, Value idx, int64_t n) {
  DType it = g.dtype(idx);
  return g.clamp(g.scalar(0, it), idx, g.scalar(static_cast<double>(n - 1), it));
}

// gather: scatter-add ct into zeros at the (clamped) indices.
Grads vjp_gather(C& c) {
  Graph& g = c.g;
  TensorType xt = c.operand_type(0);
  int axis = xt.shape.normalize_axis(c.node.attrs.get_int("axis"));
  if (xt.shape[axis] == 0) return {zeros(g, xt), Value{}};
  Value idx = clamped(g, c.operands[1], xt.shape[axis]);
  return {g.scatter_add(zeros(g, xt), idx, c.ct(), axis), Value{}};
}

Grads vjp_take_along_axis(C& c) {
  TensorType xt = c.operand_type(0);
  int axis = xt.shape.normalize_axis(c.node.attrs.get_int("axis"));
  if (xt.shape[axis] == 0) return {zeros(c.g, xt), Value{}};
  return {scatter_along_axis(c.g, c.ct(), c.operands[1], xt.shape, axis), Value{}};
}

// scatter_add: x gets ct; updates get ct gathered at their indices, 0 for dropped
// (out-of-range) indices.
Grads vjp_scatter_add(C& c) {
  Graph& g = c.g;
  TensorType xt = c.operand_type(0), ut = c.operand_type(2);
  int axis = xt.shape.normalize_axis(c.node.attrs.get_int("axis"));
  Grads out(3);
  if (c.wants[0]) out[0] = c.ct();
  if (c.wants[2]) {
    if (xt.shape[axis] == 0 || ut.shape.numel() == 0) {
      out[2] = zeros(g, ut);
    } else {
      Value idx = c.operands[1];
      DType it = g.dtype(idx);
      int ir = g.shape(idx).rank();
      Value in_range = g.logical_and(g.ge(idx, g.scalar(0, it)),
                                     g.lt(idx, g.scalar(static_cast<double>(xt.shape[axis]), it)));
      Ints dims;
      for (int i = 0; i < ir; ++i) dims.push_back(axis + i);
      Value mask = g.broadcast_in_dim(in_range, ut.shape.dims(), dims);
      Value picked = g.gather(c.ct(), clamped(g, idx, xt.shape[axis]), axis);
      out[2] = g.select(mask, picked, g.scalar(0, ut.dtype));
    }
  }
  return out;
}

// The start-index operands [first, end) of a dynamic_slice / dynamic_update_slice node.
std::vector<Value> start_indices(const C& c, size_t first) {
  return {c.operands.begin() + static_cast<std::ptrdiff_t>(first), c.operands.end()};
}

// dynamic_slice: ct written into zeros at the same (clamped) starts (lax's transpose rule).
Grads vjp_dynamic_slice(C& c) {
  Grads out(c.operands.size());
  out[0] = c.g.dynamic_update_slice(zeros(c.g, c.operand_type(0)), c.ct(), start_indices(c, 1));
  return out;
}

// dynamic_update_slice: x gets ct with the overwritten block zeroed, the update gets that
// block of ct.
Grads vjp_dynamic_update_slice(C& c) {
  Graph& g = c.g;
  std::vector<Value> starts = start_indices(c, 2);
  Grads out(c.operands.size());
  if (c.wants[0]) out[0] = g.dynamic_update_slice(c.ct(), zeros(g, c.operand_type(1)), starts);
  if (c.wants[1]) out[1] = g.dynamic_slice(c.ct(), starts, c.operand_type(1).shape.dims());
  return out;
}

}  // namespace

void register_vjp_shape() {
  set_vjp(OpKind::Reshape, vjp_reshape);
  set_vjp(OpKind::Squeeze, vjp_reshape);
  set_vjp(OpKind::ExpandDims, vjp_reshape);
  set_vjp(OpKind::Expand, vjp_expand);
  set_vjp(OpKind::Transpose, vjp_transpose);
  set_vjp(OpKind::BroadcastInDim, vjp_broadcast_in_dim);
  set_vjp(OpKind::Slice, vjp_slice);
  set_vjp(OpKind::Concatenate, vjp_concatenate);
  set_vjp(OpKind::Pad, vjp_pad);
  set_vjp(OpKind::Reverse, vjp_reverse);
  set_vjp(OpKind::DynamicSlice, vjp_dynamic_slice);
  set_vjp(OpKind::DynamicUpdateSlice, vjp_dynamic_update_slice);
  set_vjp(OpKind::Gather, vjp_gather);
  set_vjp(OpKind::TakeAlongAxis, vjp_take_along_axis);
  set_vjp(OpKind::ScatterAdd, vjp_scatter_add);
}

}  // namespace rlx::autodiff::detail
