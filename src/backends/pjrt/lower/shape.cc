// StableHLO lowerings of the shape and data-movement ops: reshape, transpose, broadcast_in_dim,
// slice, concatenate, pad, reverse, gather (jnp.take), take_along_axis, scatter_add,
// dynamic_slice and dynamic_update_slice.
#include "lower.h"

namespace rlx::pjrt::lower {
namespace {

std::vector<std::string> reshape(Emitter& e, const Node& n) {
  return {e.emit("stablehlo.reshape", {e.operand(n, 0)}, "", n.results[0])};
}

std::vector<std::string> transpose(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  return {e.emit("stablehlo.transpose", {x},
                 "permutation = " + i64_array(e.axes(n, "permutation", x.type.shape)),
                 n.results[0])};
}

std::vector<std::string> broadcast_in_dim(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  return {e.emit("stablehlo.broadcast_in_dim", {e.operand(n, 0)},
                 "broadcast_dimensions = " + i64_array(e.axes(n, "broadcast_dimensions", rt.shape)),
                 rt)};
}

std::vector<std::string> slice(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  std::vector<int64_t> strides = n.attrs.get_ints("strides");
  if (strides.empty()) strides.assign(static_cast<size_t>(x.type.shape.rank()), 1);
  return {e.emit("stablehlo.slice", {x},
                 "start_indices = " + i64_array(n.attrs.get_ints("start")) + ", limit_indices = " +
                     i64_array(n.attrs.get_ints("limit")) + ", strides = " + i64_array(strides),
                 n.results[0])};
}

std::vector<std::string> concatenate(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  std::vector<Operand> ops;
  for (size_t i = 0; i < n.operands.size(); ++i) ops.push_back(e.operand(n, i));
  int dim = rt.shape.normalize_axis(n.attrs.get_int("dimension"));
  return {
      e.emit("stablehlo.concatenate", ops, "dimension = " + std::to_string(dim) + " : i64", rt)};
}

std::vector<std::string> pad(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  std::vector<int64_t> interior = n.attrs.get_ints("interior");
  if (interior.empty()) interior.assign(static_cast<size_t>(x.type.shape.rank()), 0);
  return {e.emit("stablehlo.pad", {x, e.operand(n, 1)},
                 "edge_padding_low = " + i64_array(n.attrs.get_ints("low")) +
                     ", edge_padding_high = " + i64_array(n.attrs.get_ints("high")) +
                     ", interior_padding = " + i64_array(interior),
                 n.results[0])};
}

std::vector<std::string> reverse(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  return {e.emit("stablehlo.reverse", {x},
                 "dimensions = " + i64_array(e.axes(n, "axes", x.type.shape)), n.results[0])};
}

// jnp.take(x, idx, axis) as a gather of 1-wide slices along `axis`: the index dims take the
// axis' place in the result, the other x dims are offset dims. StableHLO clamps start indices
// into [0, n - 1], which is rlx's index clamping.
std::vector<std::string> gather(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0), idx = e.operand(n, 1);
  int64_t axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
  int64_t q = idx.type.shape.rank(), r = x.type.shape.rank();
  std::vector<int64_t> offset_dims, slice_sizes = x.type.shape.dims();
  for (int64_t d = 0; d < axis; ++d) offset_dims.push_back(d);
  for (int64_t d = axis + 1; d < r; ++d) offset_dims.push_back(d + q - 1);
  slice_sizes[static_cast<size_t>(axis)] = 1;
  std::string axis_list = "[" + std::to_string(axis) + "]";
  return {e.emit("stablehlo.gather", {x, idx},
                 "dimension_numbers = #stablehlo.gather<offset_dims = " + int_list(offset_dims) +
                     ", collapsed_slice_dims = " + axis_list + ", start_index_map = " + axis_list +
                     ", index_vector_dim = " + std::to_string(q) +
                     ">, slice_sizes = " + i64_array(slice_sizes) + ", indices_are_sorted = false",
                 n.results[0])};
}

// Full i64 coordinates into a rank-(rank(shape) - q + 1) operand, one per point of `shape`:
// the iota of each dim of `shape`, except that dims [axis, axis + q) (the index dims) give
// the single coordinate `along` (i64, of shape `shape`); stacked on a new last dim.
Operand coordinates(Emitter& e, const Shape& shape, int64_t axis, int64_t q, const Operand& along) {
  std::vector<int64_t> col_dims = shape.dims();
  col_dims.push_back(1);
  TensorType col_t{DType::i64, Shape(col_dims)};
  std::vector<Operand> cols;
  int64_t rank = shape.rank();
  auto iota = [&](int64_t d) {
    cols.push_back(
        {e.emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(d) + " : i64", col_t),
         col_t});
  };
  for (int64_t d = 0; d < axis; ++d) iota(d);
  cols.push_back({e.emit("stablehlo.reshape", {along}, "", col_t), col_t});  // q may be 0
  for (int64_t d = axis + q; d < rank; ++d) iota(d);
  std::vector<int64_t> out_dims = shape.dims();
  out_dims.push_back(static_cast<int64_t>(cols.size()));
  TensorType out_t{DType::i64, Shape(out_dims)};
  if (cols.size() == 1) return {e.emit("stablehlo.reshape", {cols[0]}, "", out_t), out_t};
  return {e.emit("stablehlo.concatenate", cols, "dimension = " + std::to_string(rank) + " : i64",
                 out_t),
          out_t};
}

// Indices as i64 (before any clamp, so u8 / i8 coordinates cannot wrap), broadcast to `shape`
// by dims `dims`.
Operand index_i64(Emitter& e, const Operand& idx, const Shape& shape,
                  const std::vector<int64_t>& dims) {
  TensorType t64{DType::i64, idx.type.shape};
  Operand i = idx.type.dtype == DType::i64
                  ? idx
                  : Operand{e.emit("stablehlo.convert", {idx}, "", t64), t64};
  if (idx.type.shape == shape) return i;
  TensorType bt{DType::i64, shape};
  return {
      e.emit("stablehlo.broadcast_in_dim", {i}, "broadcast_dimensions = " + i64_array(dims), bt),
      bt};
}

// i64 indices clamped into [0, len - 1].
Operand clamp_index(Emitter& e, const Operand& i, int64_t len) {
  TensorType scalar{DType::i64, Shape{}};
  return {e.emit("stablehlo.clamp",
                 {{e.splat(DType::i64, Shape{}, 0), scalar},
                  i,
                  {e.splat(DType::i64, Shape{}, static_cast<double>(len - 1)), scalar}},
                 "", i.type),
          i.type};
}

// The start-index operands [first, end) of n as i64 scalars (StableHLO wants one integer
// type for all; converting first keeps u8 starts unsigned). StableHLO clamps each start to
// [0, dim - size] itself, which is rlx's rule.
std::vector<Operand> start_operands(Emitter& e, const Node& n, size_t first) {
  std::vector<Operand> starts;
  for (size_t i = first; i < n.operands.size(); ++i)
    starts.push_back(index_i64(e, e.operand(n, i), Shape{}, {}));
  return starts;
}

std::vector<std::string> dynamic_slice(Emitter& e, const Node& n) {
  std::vector<Operand> ops{e.operand(n, 0)};
  for (Operand& s : start_operands(e, n, 1)) ops.push_back(std::move(s));
  return {e.emit("stablehlo.dynamic_slice", ops,
                 "slice_sizes = " + i64_array(n.attrs.get_ints("slice_sizes")), n.results[0])};
}

std::vector<std::string> dynamic_update_slice(Emitter& e, const Node& n) {
  std::vector<Operand> ops{e.operand(n, 0), e.operand(n, 1)};
  for (Operand& s : start_operands(e, n, 2)) ops.push_back(std::move(s));
  return {e.emit("stablehlo.dynamic_update_slice", ops, "", n.results[0])};
}

// Dimension numbers of a gather (or scatter) of single elements of a rank-r operand at full
// coordinates stored along `index_vector_dim`.
std::string point_dims(bool gather, int64_t r, int64_t index_vector_dim) {
  std::vector<int64_t> all(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) all[static_cast<size_t>(d)] = d;
  if (gather)
    return "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = " + int_list(all) +
           ", start_index_map = " + int_list(all) +
           ", index_vector_dim = " + std::to_string(index_vector_dim) + ">";
  return "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = " + int_list(all) +
         ", scatter_dims_to_operand_dims = " + int_list(all) +
         ", index_vector_dim = " + std::to_string(index_vector_dim) + ">";
}

// jnp.take_along_axis (numpy broadcasting of the other dims): a point gather whose
// coordinates are the output's iotas, with the index (explicitly clamped into [0, n - 1], as
// rlx specifies; gather's own clamping is implementation detail) along `axis`.
std::vector<std::string> take_along_axis(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0), idx = e.operand(n, 1);
  const TensorType& rt = n.results[0];
  int64_t r = x.type.shape.rank(), axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
  int64_t len = x.type.shape.dims()[static_cast<size_t>(axis)];
  if (rt.shape.numel() == 0) return {e.splat(rt.dtype, rt.shape, 0)};
  std::vector<int64_t> same(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) same[static_cast<size_t>(d)] = d;
  Operand i = index_i64(e, idx, rt.shape, same);
  Operand clamped = clamp_index(e, i, len);
  Operand coords = coordinates(e, rt.shape, axis, 1, clamped);
  // x's size-1 dims broadcast against the indices: gather from x broadcast to rt's shape
  // (with x's own extent along axis).
  Shape xs = rt.shape;
  xs.dims()[static_cast<size_t>(axis)] = len;
  Operand xb = x.type.shape == xs
                   ? x
                   : Operand{e.emit("stablehlo.broadcast_in_dim", {x},
                                    "broadcast_dimensions = " + i64_array(same), {rt.dtype, xs}),
                             {rt.dtype, xs}};
  return {e.emit("stablehlo.gather", {xb, coords},
                 point_dims(true, r, r) + ", slice_sizes = " +
                     i64_array(std::vector<int64_t>(static_cast<size_t>(r), 1)) +
                     ", indices_are_sorted = false",
                 rt)};
}

// rlx scatter_add: updates [x[:axis], indices..., x[axis+1:]] added at x[..., idx, ...]. A
// point scatter with an add region; out-of-range updates are dropped explicitly (not left to
// the implementation-defined out-of-bounds behaviour): their index is clamped and their
// value replaced by -0, the identity of float addition that keeps x's -0 (0 for integers).
std::vector<std::string> scatter_add(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0), idx = e.operand(n, 1), upd = e.operand(n, 2);
  const TensorType& rt = n.results[0];
  int64_t r = x.type.shape.rank(), axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
  int64_t q = idx.type.shape.rank();
  int64_t len = x.type.shape.dims()[static_cast<size_t>(axis)];
  const Shape& us = upd.type.shape;
  if (us.numel() == 0 || len == 0) return {x.name};  // nothing lands in x
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < q; ++d) dims.push_back(axis + d);
  Operand i = index_i64(e, idx, us, dims);
  TensorType it{DType::i64, us}, bt{DType::bool_, us};
  std::string lo = e.splat(DType::i64, us, 0),
              hi = e.splat(DType::i64, us, static_cast<double>(len));
  std::string valid =
      e.emit("stablehlo.and",
             {{e.compare("GE", i, {lo, it}), bt}, {e.compare("LT", i, {hi, it}), bt}}, "", bt);
  Operand clamped = clamp_index(e, i, len);
  std::string zero = e.splat(rt.dtype, us, is_float(rt.dtype) ? -0.0 : 0.0);
  Operand masked{e.emit("stablehlo.select", {{valid, bt}, upd, {zero, upd.type}}, "", upd.type),
                 upd.type};
  Operand coords = coordinates(e, us, axis, q, clamped);
  return {e.emit(
      "stablehlo.scatter", {x, coords, masked},
      point_dims(false, r, us.rank()) + ", indices_are_sorted = false, unique_indices = false", rt,
      e.combiner_region(rt.dtype, "stablehlo.add"))};
}

}  // namespace

void register_shape_lowerings(OpTable<LowerFn>& t) {
  t.set(OpKind::Reshape, reshape);
  t.set(OpKind::Transpose, transpose);
  t.set(OpKind::BroadcastInDim, broadcast_in_dim);
  t.set(OpKind::Slice, slice);
  t.set(OpKind::Concatenate, concatenate);
  t.set(OpKind::Pad, pad);
  t.set(OpKind::Reverse, reverse);
  t.set(OpKind::Gather, gather);
  t.set(OpKind::TakeAlongAxis, take_along_axis);
  t.set(OpKind::ScatterAdd, scatter_add);
  t.set(OpKind::DynamicSlice, dynamic_slice);
  t.set(OpKind::DynamicUpdateSlice, dynamic_update_slice);
}

}  // namespace rlx::pjrt::lower
