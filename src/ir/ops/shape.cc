// Shape and data-movement ops (reshape ... expand_dims, dynamic_slice, dynamic_update_slice):
// attribute schemas and shape inference.
#include <algorithm>
#include <string>
#include <vector>

#include "registry.h"

namespace rlx::detail {
namespace {

using Ints = std::vector<int64_t>;

// Every result goes through here, so a result whose numel overflows int64 fails with the
// op's own message (emit() checks it again for every op).
std::vector<TensorType> result(const InferContext& ctx, DType t, Shape s) {
  int64_t n = 1;
  for (int64_t d : s.dims()) {
    if (d < 0) ctx.fail("result shape " + s.to_string() + " has a negative dim");
    if (d == 0) return {{t, std::move(s)}};
  }
  for (int64_t d : s.dims())
    if (__builtin_mul_overflow(n, d, &n))
      ctx.fail("result shape " + s.to_string() + " has more than 2^63 elements");
  return {{t, std::move(s)}};
}

void require_length(const InferContext& ctx, const char* attr, const Ints& v, int rank) {
  if (static_cast<int64_t>(v.size()) != rank)
    ctx.fail(std::string(attr) + " " + ints_to_string(v) + " must have one entry per dim (" +
             std::to_string(rank) + "), got " + std::to_string(v.size()));
}

void require_non_negative(const InferContext& ctx, const char* attr, const Ints& v) {
  for (int64_t d : v)
    if (d < 0)
      ctx.fail(std::string(attr) + " " + ints_to_string(v) + " has a negative entry " +
               std::to_string(d));
}

void require_index_dtype(const InferContext& ctx, DType t) {
  require_dtype(ctx, t, is_integer(t), "an integer dtype (i8, u8, i32, i64)", "indices");
}

bool non_empty(const Shape& s) {
  return std::all_of(s.dims().begin(), s.dims().end(), [](int64_t d) { return d > 0; });
}

std::vector<TensorType> infer_reshape(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  Ints dims = ctx.attrs.get_ints("shape");
  int wildcard = -1;
  int64_t known = 1;
  bool overflow = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (wildcard >= 0) ctx.fail("shape " + ints_to_string(dims) + " has more than one -1");
      wildcard = static_cast<int>(i);
    } else if (dims[i] < 0) {
      ctx.fail("shape " + ints_to_string(dims) + " has a negative dim " + std::to_string(dims[i]) +
               " (only -1 is allowed)");
    } else {
      overflow = overflow || __builtin_mul_overflow(known, dims[i], &known);
    }
  }
  int64_t n = x.shape.numel();
  if (wildcard >= 0) {
    // numel 0 with a 0 among the other dims leaves -1 undetermined; numpy rejects it too.
    if (!overflow && known == 0)
      ctx.fail("cannot infer the -1 of shape " + ints_to_string(dims) + " for " +
               x.shape.to_string() + ": the other dims have 0 elements");
    if (overflow || n % known != 0)
      ctx.fail("cannot reshape " + x.shape.to_string() + " (" + std::to_string(n) +
               " elements) to " + ints_to_string(dims) + ": not divisible by the other dims");
    dims[static_cast<size_t>(wildcard)] = n / known;
  } else if (overflow || known != n) {
    ctx.fail("cannot reshape " + x.shape.to_string() + " (" + std::to_string(n) + " elements) to " +
             ints_to_string(dims) + " (" +
             (overflow ? std::string("more than 2^63") : std::to_string(known)) + " elements)");
  }
  return {{x.dtype, Shape(std::move(dims))}};
}

std::vector<TensorType> infer_transpose(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const Ints& perm = ctx.attrs.get_ints("permutation");
  int rank = x.shape.rank();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool ok = static_cast<int64_t>(perm.size()) == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < rank && !seen[static_cast<size_t>(perm[i])];
    if (ok) seen[static_cast<size_t>(perm[i])] = true;
  }
  if (!ok)
    ctx.fail("permutation " + ints_to_string(perm) + " must list each of the " +
             std::to_string(rank) + " dims of " + x.shape.to_string() + " exactly once");
  Shape out;
  for (int64_t p : perm) out.dims().push_back(x.shape[static_cast<int>(p)]);
  return {{x.dtype, std::move(out)}};
}

std::vector<TensorType> infer_broadcast_in_dim(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const Ints& shape = ctx.attrs.get_ints("shape");
  const Ints& bd = ctx.attrs.get_ints("broadcast_dimensions");
  require_non_negative(ctx, "shape", shape);
  int out_rank = static_cast<int>(shape.size());
  if (static_cast<int>(bd.size()) != x.shape.rank())
    ctx.fail("broadcast_dimensions " + ints_to_string(bd) +
             " must have one entry per operand dim (" + std::to_string(x.shape.rank()) + "), got " +
             std::to_string(bd.size()));
  std::vector<bool> seen(static_cast<size_t>(out_rank), false);
  for (size_t i = 0; i < bd.size(); ++i) {
    if (bd[i] < 0 || bd[i] >= out_rank)
      ctx.fail("broadcast_dimensions entry " + std::to_string(bd[i]) +
               " is out of range for result rank " + std::to_string(out_rank));
    if (seen[static_cast<size_t>(bd[i])])
      ctx.fail("broadcast_dimensions " + ints_to_string(bd) + " repeats " + std::to_string(bd[i]));
    seen[static_cast<size_t>(bd[i])] = true;
    int64_t d = x.shape[static_cast<int>(i)];
    int64_t want = shape[static_cast<size_t>(bd[i])];
    if (d != 1 && d != want)
      ctx.fail("operand dim " + std::to_string(i) + " of size " + std::to_string(d) +
               " cannot broadcast to result dim " + std::to_string(bd[i]) + " of size " +
               std::to_string(want) + " (operand " + x.shape.to_string() + ", shape " +
               ints_to_string(shape) + ")");
  }
  return result(ctx, x.dtype, Shape(shape));
}

std::vector<TensorType> infer_expand(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const Ints& shape = ctx.attrs.get_ints("shape");
  require_non_negative(ctx, "shape", shape);
  auto out = broadcast_shapes(x.shape, Shape(shape));
  if (!out)
    ctx.fail("operand shape " + x.shape.to_string() + " does not broadcast with shape " +
             ints_to_string(shape));
  return result(ctx, x.dtype, *out);
}

std::vector<TensorType> infer_slice(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  int rank = x.shape.rank();
  const Ints& start = ctx.attrs.get_ints("start");
  const Ints& limit = ctx.attrs.get_ints("limit");
  const Ints& strides = ctx.attrs.get_ints("strides");
  require_length(ctx, "start", start, rank);
  require_length(ctx, "limit", limit, rank);
  if (!strides.empty()) require_length(ctx, "strides", strides, rank);
  Shape out;
  for (int i = 0; i < rank; ++i) {
    auto k = static_cast<size_t>(i);
    int64_t s = start[k], l = limit[k], st = strides.empty() ? 1 : strides[k];
    if (!(0 <= s && s <= l && l <= x.shape[i]))
      ctx.fail("slice of dim " + std::to_string(i) + " (size " + std::to_string(x.shape[i]) +
               ") needs 0 <= start <= limit <= size, got start " + std::to_string(s) +
               " and limit " + std::to_string(l));
    if (st < 1) ctx.fail("strides " + ints_to_string(strides) + " must be >= 1");
    out.dims().push_back(l == s ? 0 : (l - s - 1) / st + 1);
  }
  return {{x.dtype, std::move(out)}};
}

std::vector<TensorType> infer_concatenate(const InferContext& ctx) {
  if (ctx.operands.empty()) ctx.fail("concatenate needs at least one operand");
  const TensorType& first = ctx.operands[0];
  int rank = first.shape.rank();
  if (rank == 0) ctx.fail("cannot concatenate rank-0 operands");
  int dim = normalize_axis(ctx, ctx.attrs.get_int("dimension"), rank, "dimension");
  Shape out = first.shape;
  for (size_t i = 1; i < ctx.operands.size(); ++i) {
    const TensorType& t = ctx.operands[i];
    std::string which = "operand " + std::to_string(i) + " ";
    if (t.dtype != first.dtype)
      ctx.fail(which + "has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
               std::string(dtype_name(first.dtype)) + " (as operand 0)");
    if (t.shape.rank() != rank)
      ctx.fail(which + "has shape " + t.shape.to_string() + " of rank " +
               std::to_string(t.shape.rank()) + ", expected rank " + std::to_string(rank) +
               " (operand 0 is " + first.shape.to_string() + ")");
    for (int d = 0; d < rank; ++d)
      if (d != dim && t.shape[d] != first.shape[d])
        ctx.fail(which + "has shape " + t.shape.to_string() + ", which differs from operand 0's " +
                 first.shape.to_string() + " in dim " + std::to_string(d) + " (only dimension " +
                 std::to_string(dim) + " may differ)");
    out[dim] = checked_add(ctx, out[dim], t.shape[dim]);
  }
  return result(ctx, first.dtype, std::move(out));
}

std::vector<TensorType> infer_pad(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const TensorType& value = ctx.operands[1];
  int rank = x.shape.rank();
  if (value.shape.rank() != 0)
    ctx.fail("padding_value must be rank 0, got shape " + value.shape.to_string());
  if (value.dtype != x.dtype)
    ctx.fail("padding_value dtype " + std::string(dtype_name(value.dtype)) + " must equal x's " +
             std::string(dtype_name(x.dtype)));
  const Ints& low = ctx.attrs.get_ints("low");
  const Ints& high = ctx.attrs.get_ints("high");
  const Ints& interior = ctx.attrs.get_ints("interior");
  require_length(ctx, "low", low, rank);
  require_length(ctx, "high", high, rank);
  if (!interior.empty()) {
    require_length(ctx, "interior", interior, rank);
    require_non_negative(ctx, "interior", interior);
  }
  Shape out;
  for (int i = 0; i < rank; ++i) {
    auto k = static_cast<size_t>(i);
    int64_t d = x.shape[i];
    int64_t in = interior.empty() ? 0 : interior[k];
    int64_t n = checked_add(ctx, checked_add(ctx, low[k], high[k]),
                            checked_add(ctx, d, checked_mul(ctx, std::max<int64_t>(d - 1, 0), in)));
    if (n < 0)
      ctx.fail("padding dim " + std::to_string(i) + " (size " + std::to_string(d) + ") with low " +
               std::to_string(low[k]) + ", high " + std::to_string(high[k]) + " and interior " +
               std::to_string(in) + " gives negative size " + std::to_string(n));
    out.dims().push_back(n);
  }
  return result(ctx, x.dtype, std::move(out));
}

std::vector<TensorType> infer_gather(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const TensorType& idx = ctx.operands[1];
  require_index_dtype(ctx, idx.dtype);
  int axis = normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  if (x.shape[axis] == 0 && non_empty(idx.shape))
    ctx.fail("cannot gather " + idx.shape.to_string() + " indices from axis " +
             std::to_string(axis) + " of size 0");
  Shape out;
  auto& o = out.dims();
  const auto& xd = x.shape.dims();
  o.insert(o.end(), xd.begin(), xd.begin() + axis);
  o.insert(o.end(), idx.shape.dims().begin(), idx.shape.dims().end());
  o.insert(o.end(), xd.begin() + axis + 1, xd.end());
  return result(ctx, x.dtype, std::move(out));
}

std::vector<TensorType> infer_take_along_axis(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const TensorType& idx = ctx.operands[1];
  require_index_dtype(ctx, idx.dtype);
  int rank = x.shape.rank();
  if (idx.shape.rank() != rank)
    ctx.fail("indices must have x's rank " + std::to_string(rank) + ", got shape " +
             idx.shape.to_string());
  int axis = normalize_axis(ctx, ctx.attrs.get_int("axis"), rank);
  if (x.shape[axis] == 0 && non_empty(idx.shape))
    ctx.fail("cannot take " + idx.shape.to_string() + " indices along axis " +
             std::to_string(axis) + " of size 0");
  Shape out;
  for (int d = 0; d < rank; ++d) {
    int64_t a = x.shape[d], b = idx.shape[d];
    if (d == axis) {
      out.dims().push_back(b);
    } else if (a == b || a == 1 || b == 1) {
      out.dims().push_back(a == 1 ? b : a);
    } else {
      ctx.fail("dim " + std::to_string(d) + " of x " + x.shape.to_string() + " and indices " +
               idx.shape.to_string() + " does not broadcast (" + std::to_string(a) + " vs " +
               std::to_string(b) + ")");
    }
  }
  return result(ctx, x.dtype, std::move(out));
}

std::vector<TensorType> infer_scatter_add(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const TensorType& idx = ctx.operands[1];
  const TensorType& upd = ctx.operands[2];
  ctx.require_op_dtype(x.dtype, "x");
  require_index_dtype(ctx, idx.dtype);
  if (upd.dtype != x.dtype)
    ctx.fail("updates dtype " + std::string(dtype_name(upd.dtype)) + " must equal x's " +
             std::string(dtype_name(x.dtype)));
  int axis = normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  Ints want(x.shape.dims().begin(), x.shape.dims().begin() + axis);
  want.insert(want.end(), idx.shape.dims().begin(), idx.shape.dims().end());
  want.insert(want.end(), x.shape.dims().begin() + axis + 1, x.shape.dims().end());
  if (upd.shape.dims() != want)
    ctx.fail("updates shape must be " + ints_to_string(want) +
             " (x.shape[:axis] + indices.shape + x.shape[axis+1:]), got " + upd.shape.to_string());
  return {x};
}

// The start-index operands [first, first + rank) of dynamic_slice / dynamic_update_slice: one
// rank-0 integer per dim of x, all of one dtype (as StableHLO requires; lax converts them).
void check_start_indices(const InferContext& ctx, size_t first, const char* layout) {
  const TensorType& x = ctx.operands[0];
  const size_t rank = static_cast<size_t>(x.shape.rank());
  if (ctx.operands.size() != first + rank)
    ctx.fail("needs " + std::string(layout) + " and one start index per dim of x " +
             x.shape.to_string() + ": " + std::to_string(first + rank) + " operands, got " +
             std::to_string(ctx.operands.size()));
  for (size_t i = first; i < ctx.operands.size(); ++i) {
    const TensorType& s = ctx.operands[i];
    std::string what =
        "start index " + std::to_string(i - first) + " (operand " + std::to_string(i) + ")";
    if (s.shape.rank() != 0) ctx.fail(what + " must be a scalar, got shape " + s.shape.to_string());
    require_dtype(ctx, s.dtype, is_integer(s.dtype), "an integer dtype (i8, u8, i32, i64)", what);
    if (s.dtype != ctx.operands[first].dtype)
      ctx.fail(what + " has dtype " + std::string(dtype_name(s.dtype)) +
               ", but start index 0 has " + std::string(dtype_name(ctx.operands[first].dtype)) +
               " (all start indices share one dtype)");
  }
}

std::vector<TensorType> infer_dynamic_slice(const InferContext& ctx) {
  if (ctx.operands.empty()) ctx.fail("needs x and one start index per dim of x, got no operands");
  const TensorType& x = ctx.operands[0];
  check_start_indices(ctx, 1, "x");
  const Ints& sizes = ctx.attrs.get_ints("slice_sizes");
  require_length(ctx, "slice_sizes", sizes, x.shape.rank());
  for (int i = 0; i < x.shape.rank(); ++i) {
    int64_t n = sizes[static_cast<size_t>(i)];
    if (n < 0 || n > x.shape[i])
      ctx.fail("slice_sizes " + ints_to_string(sizes) + " must satisfy 0 <= size <= dim, but dim " +
               std::to_string(i) + " of x " + x.shape.to_string() + " has size " +
               std::to_string(x.shape[i]) + " and the slice " + std::to_string(n));
  }
  return {{x.dtype, Shape(sizes)}};
}

std::vector<TensorType> infer_dynamic_update_slice(const InferContext& ctx) {
  if (ctx.operands.size() < 2)
    ctx.fail("needs x, update and one start index per dim of x, got " +
             std::to_string(ctx.operands.size()) + " operands");
  const TensorType& x = ctx.operands[0];
  const TensorType& u = ctx.operands[1];
  if (u.dtype != x.dtype)
    ctx.fail("update dtype " + std::string(dtype_name(u.dtype)) + " must equal x's " +
             std::string(dtype_name(x.dtype)));
  if (u.shape.rank() != x.shape.rank())
    ctx.fail("update " + u.shape.to_string() + " must have x's rank " +
             std::to_string(x.shape.rank()) + " (x is " + x.shape.to_string() + ")");
  for (int i = 0; i < x.shape.rank(); ++i)
    if (u.shape[i] > x.shape[i])
      ctx.fail("update " + u.shape.to_string() + " is larger than x " + x.shape.to_string() +
               " in dim " + std::to_string(i));
  check_start_indices(ctx, 2, "x, update");
  return {x};
}

std::vector<TensorType> infer_reverse(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  normalize_axes(ctx, ctx.attrs.get_ints("axes"), x.shape.rank());
  return {x};
}

std::vector<TensorType> infer_squeeze(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  std::vector<int> axes = normalize_axes(ctx, ctx.attrs.get_ints("axes"), x.shape.rank());
  std::vector<bool> drop(static_cast<size_t>(x.shape.rank()), false);
  for (int a : axes) {
    if (x.shape[a] != 1)
      ctx.fail("cannot squeeze axis " + std::to_string(a) + " of size " +
               std::to_string(x.shape[a]) + " (must be 1) in shape " + x.shape.to_string());
    drop[static_cast<size_t>(a)] = true;
  }
  Shape out;
  for (int d = 0; d < x.shape.rank(); ++d)
    if (!drop[static_cast<size_t>(d)]) out.dims().push_back(x.shape[d]);
  return {{x.dtype, std::move(out)}};
}

std::vector<TensorType> infer_expand_dims(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const Ints& axes = ctx.attrs.get_ints("axes");
  int out_rank = x.shape.rank() + static_cast<int>(axes.size());
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int a : normalize_axes(ctx, axes, out_rank)) inserted[static_cast<size_t>(a)] = true;
  Shape out;
  int next = 0;
  for (int d = 0; d < out_rank; ++d)
    out.dims().push_back(inserted[static_cast<size_t>(d)] ? 1 : x.shape[next++]);
  return {{x.dtype, std::move(out)}};
}

}  // namespace

void register_shape_ops() {
  const Ints none;
  define_op(OpKind::Reshape, {req("shape", AttrType::Ints)}, infer_reshape);
  define_op(OpKind::Transpose, {req("permutation", AttrType::Ints)}, infer_transpose);
  define_op(OpKind::BroadcastInDim,
            {req("shape", AttrType::Ints), req("broadcast_dimensions", AttrType::Ints)},
            infer_broadcast_in_dim);
  define_op(OpKind::Expand, {req("shape", AttrType::Ints)}, infer_expand);
  // strides [] means all 1 (lax.slice's strides=None).
  define_op(OpKind::Slice,
            {req("start", AttrType::Ints), req("limit", AttrType::Ints),
             def("strides", AttrType::Ints, none)},
            infer_slice);
  define_op(OpKind::Concatenate, {req("dimension", AttrType::Int)}, infer_concatenate);
  // interior [] means no interior padding.
  define_op(OpKind::Pad,
            {req("low", AttrType::Ints), req("high", AttrType::Ints),
             def("interior", AttrType::Ints, none)},
            infer_pad);
  define_op(OpKind::Gather, {req("axis", AttrType::Int)}, infer_gather);
  define_op(OpKind::TakeAlongAxis, {req("axis", AttrType::Int)}, infer_take_along_axis);
  define_op(OpKind::ScatterAdd, {req("axis", AttrType::Int)}, infer_scatter_add);
  define_op(OpKind::DynamicSlice, {req("slice_sizes", AttrType::Ints)}, infer_dynamic_slice);
  define_op(OpKind::DynamicUpdateSlice, {}, infer_dynamic_update_slice);
  define_op(OpKind::Reverse, {req("axes", AttrType::Ints)}, infer_reverse);
  define_op(OpKind::Squeeze, {req("axes", AttrType::Ints)}, infer_squeeze);
  define_op(OpKind::ExpandDims, {req("axes", AttrType::Ints)}, infer_expand_dims);
}

}  // namespace rlx::detail
