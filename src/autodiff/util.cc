// Helpers shared by the vjp rule families: zeros, undoing broadcasts and reductions, and the
// transpose of take_along_axis.
#include <algorithm>

#include "rules.h"

namespace rlx::autodiff::detail {

Value zeros(Graph& g, const TensorType& type) {
  return g.broadcast_in_dim(g.scalar(0.0, type.dtype), type.shape.dims(), {});
}

Value unbroadcast(Graph& g, Value ct, const Shape& shape) {
  Shape from = g.shape(ct);
  if (from == shape) return ct;
  const int lead = from.rank() - shape.rank();
  std::vector<int64_t> axes;
  for (int i = 0; i < from.rank(); ++i)
    if (i < lead || (shape[i - lead] == 1 && from[i] != 1)) axes.push_back(i);
  Value s = axes.empty() ? ct : g.reduce_sum(ct, axes);
  return g.reshape(s, shape.dims());
}

std::vector<int64_t> sorted_axes(const std::vector<int64_t>& axes, int rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) out.push_back(a < 0 ? a + rank : a);
  std::sort(out.begin(), out.end());
  return out;
}

Value broadcast_back(Graph& g, Value v, const Shape& shape, const std::vector<int64_t>& axes) {
  std::vector<int64_t> ax = sorted_axes(axes, shape.rank());
  // Operand dim i of the (non-keepdims) reduced value maps to every result dim not reduced.
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < shape.rank(); ++d)
    if (!std::binary_search(ax.begin(), ax.end(), d)) kept.push_back(d);
  Shape vs = g.shape(v);
  if (vs.rank() == shape.rank()) {  // keepdims: drop the size-1 reduced dims first
    std::vector<int64_t> dims;
    for (int64_t d : kept) dims.push_back(shape[static_cast<int>(d)]);
    v = g.reshape(v, dims);
  }
  return g.broadcast_in_dim(v, shape.dims(), kept);
}

Value scatter_along_axis(Graph& g, Value ct, Value indices, const Shape& x_shape, int axis) {
  // One-hot along a new dim after `axis`: dx[..., i, ...] = sum_j ct[..., j, ...] *
  // (idx[..., j, ...] == i). Select keeps a NaN cotangent from leaking into other positions.
  const int64_t n = x_shape[axis];
  Shape is = g.shape(indices);
  DType it = g.dtype(indices);
  Value idx = g.clamp(g.scalar(0.0, it), indices, g.scalar(static_cast<double>(n - 1), it));
  Value idx_e = g.expand_dims(idx, {axis + 1});
  std::vector<int64_t> pos_shape(static_cast<size_t>(is.rank() + 1), 1);
  pos_shape[static_cast<size_t>(axis + 1)] = n;
  Value pos = g.iota(it, Shape(pos_shape), axis + 1);
  Value hit = g.eq(idx_e, pos);
  Value ct_e = g.expand_dims(ct, {axis + 1});
  Value spread = g.select(hit, ct_e, g.scalar(0.0, g.dtype(ct)));
  Value summed = g.reduce_sum(spread, {axis});
  return unbroadcast(g, summed, x_shape);
}

}  // namespace rlx::autodiff::detail
