// Reference kernels for shape and data-movement ops (reshape ... expand_dims, dynamic_slice,
// dynamic_update_slice).
#include <algorithm>
#include <cstring>
#include <vector>

#include "eval.h"

namespace rlx::detail {
namespace {

using Ints = std::vector<int64_t>;

// Data movement copies raw element bytes, so every dtype (NaN payloads, -0, i64 beyond 2^53)
// comes through bit-exact without a round trip through double or int64.
void copy_elem(Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  auto size = static_cast<size_t>(dtype_size(src.dtype()));
  std::memcpy(dst.data() + static_cast<size_t>(di) * size,
              src.data() + static_cast<size_t>(si) * size, size);
}

Tensor result_tensor(const EvalContext& ctx) {
  const TensorType& t = ctx.result_type();
  return Tensor(t.dtype, t.shape);
}

// Clamps a gather index into [0, n-1] (StableHLO / jnp.take mode="clip"); n >= 1 here because
// inference rejects non-empty indices into an empty axis.
int64_t clamp_index(const Tensor& indices, int64_t i, int64_t n) {
  return std::clamp<int64_t>(indices.get_i64(i), 0, n - 1);
}

// reshape, squeeze and expand_dims keep the row-major element order: a flat copy.
std::vector<Tensor> eval_flat_copy(const EvalContext& ctx) {
  Tensor out = result_tensor(ctx);
  if (out.nbytes() > 0) std::memcpy(out.data(), ctx.operands[0].data(), out.nbytes());
  return {out};
}

std::vector<Tensor> eval_transpose(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Ints& perm = ctx.attrs().get_ints("permutation");
  Tensor out = result_tensor(ctx);
  Ints in_idx(perm.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = unravel(i, out.shape());
    for (size_t k = 0; k < perm.size(); ++k) in_idx[static_cast<size_t>(perm[k])] = idx[k];
    copy_elem(out, i, x, ravel(in_idx, x.shape()));
  }
  return {out};
}

std::vector<Tensor> eval_broadcast_in_dim(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Ints& bd = ctx.attrs().get_ints("broadcast_dimensions");
  Tensor out = result_tensor(ctx);
  Ints in_idx(bd.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = unravel(i, out.shape());
    for (size_t k = 0; k < bd.size(); ++k)
      in_idx[k] = x.shape()[static_cast<int>(k)] == 1 ? 0 : idx[static_cast<size_t>(bd[k])];
    copy_elem(out, i, x, ravel(in_idx, x.shape()));
  }
  return {out};
}

std::vector<Tensor> eval_expand(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  Tensor out = result_tensor(ctx);
  BroadcastIndexer from(x.shape(), out.shape());
  for (int64_t i = 0; i < out.numel(); ++i) copy_elem(out, i, x, from(i));
  return {out};
}

std::vector<Tensor> eval_slice(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Ints& start = ctx.attrs().get_ints("start");
  const Ints& strides = ctx.attrs().get_ints("strides");
  Tensor out = result_tensor(ctx);
  Ints in_idx(start.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = unravel(i, out.shape());
    for (size_t k = 0; k < start.size(); ++k)
      in_idx[k] = start[k] + idx[k] * (strides.empty() ? 1 : strides[k]);
    copy_elem(out, i, x, ravel(in_idx, x.shape()));
  }
  return {out};
}

std::vector<Tensor> eval_concatenate(const EvalContext& ctx) {
  Tensor out = result_tensor(ctx);
  int dim = out.shape().normalize_axis(ctx.attrs().get_int("dimension"));
  int64_t offset = 0;
  for (const Tensor& x : ctx.operands) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      Ints idx = unravel(i, x.shape());
      idx[static_cast<size_t>(dim)] += offset;
      copy_elem(out, ravel(idx, out.shape()), x, i);
    }
    offset += x.shape()[dim];
  }
  return {out};
}

// lax.pad: operand element i lands at low + i * (interior + 1) in each dim; negative low/high
// crop, so elements landing outside the result are dropped.
std::vector<Tensor> eval_pad(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& value = ctx.operands[1];
  const Ints& low = ctx.attrs().get_ints("low");
  const Ints& interior = ctx.attrs().get_ints("interior");
  Tensor out = result_tensor(ctx);
  for (int64_t i = 0; i < out.numel(); ++i) copy_elem(out, i, value, 0);
  Ints out_idx(low.size());
  for (int64_t i = 0; i < x.numel(); ++i) {
    Ints idx = unravel(i, x.shape());
    bool inside = true;
    for (size_t k = 0; k < low.size(); ++k) {
      out_idx[k] = low[k] + idx[k] * ((interior.empty() ? 0 : interior[k]) + 1);
      inside = inside && out_idx[k] >= 0 && out_idx[k] < out.shape()[static_cast<int>(k)];
    }
    if (inside) copy_elem(out, ravel(out_idx, out.shape()), x, i);
  }
  return {out};
}

std::vector<Tensor> eval_gather(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& indices = ctx.operands[1];
  int axis = x.shape().normalize_axis(ctx.attrs().get_int("axis"));
  int ir = indices.shape().rank();
  Tensor out = result_tensor(ctx);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = unravel(i, out.shape());
    // out index = x prefix [0, axis) + indices index [axis, axis + ir) + x suffix.
    std::span<const int64_t> in_ind(idx.data() + axis, static_cast<size_t>(ir));
    Ints x_idx(idx.begin(), idx.begin() + axis);
    x_idx.push_back(clamp_index(indices, ravel(in_ind, indices.shape()), x.shape()[axis]));
    x_idx.insert(x_idx.end(), idx.begin() + axis + ir, idx.end());
    copy_elem(out, i, x, ravel(x_idx, x.shape()));
  }
  return {out};
}

std::vector<Tensor> eval_take_along_axis(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& indices = ctx.operands[1];
  int rank = x.shape().rank();
  int axis = x.shape().normalize_axis(ctx.attrs().get_int("axis"));
  Tensor out = result_tensor(ctx);
  Ints x_idx(static_cast<size_t>(rank)), ind_idx(static_cast<size_t>(rank));
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = unravel(i, out.shape());
    for (int d = 0; d < rank; ++d) {
      auto k = static_cast<size_t>(d);
      ind_idx[k] = indices.shape()[d] == 1 ? 0 : idx[k];  // numpy broadcasting of size-1 dims
      x_idx[k] = x.shape()[d] == 1 ? 0 : idx[k];
    }
    x_idx[static_cast<size_t>(axis)] =
        clamp_index(indices, ravel(ind_idx, indices.shape()), x.shape()[axis]);
    copy_elem(out, i, x, ravel(x_idx, x.shape()));
  }
  return {out};
}

// Each output accumulates x plus all its updates in double (floats, rounded once at the end)
// or in wrapping 64-bit unsigned arithmetic (integers, wrapped to the dtype by set_i64).
std::vector<Tensor> eval_scatter_add(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& indices = ctx.operands[1];
  const Tensor& updates = ctx.operands[2];
  int axis = x.shape().normalize_axis(ctx.attrs().get_int("axis"));
  int ir = indices.shape().rank();
  int64_t n = x.shape()[axis];
  bool fp = is_float(x.dtype());
  std::vector<double> acc_f(fp ? static_cast<size_t>(x.numel()) : 0);
  std::vector<uint64_t> acc_i(fp ? 0 : static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (fp)
      acc_f[static_cast<size_t>(i)] = x.get_f64(i);
    else
      acc_i[static_cast<size_t>(i)] = static_cast<uint64_t>(x.get_i64(i));
  }
  for (int64_t u = 0; u < updates.numel(); ++u) {
    Ints idx = unravel(u, updates.shape());
    std::span<const int64_t> in_ind(idx.data() + axis, static_cast<size_t>(ir));
    int64_t target = indices.get_i64(ravel(in_ind, indices.shape()));
    if (target < 0 || target >= n) continue;  // out-of-range updates are dropped
    Ints x_idx(idx.begin(), idx.begin() + axis);
    x_idx.push_back(target);
    x_idx.insert(x_idx.end(), idx.begin() + axis + ir, idx.end());
    auto o = static_cast<size_t>(ravel(x_idx, x.shape()));
    if (fp)
      acc_f[o] += updates.get_f64(u);
    else
      acc_i[o] += static_cast<uint64_t>(updates.get_i64(u));
  }
  Tensor out = result_tensor(ctx);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (fp)
      out.set_f64(i, acc_f[static_cast<size_t>(i)]);
    else
      out.set_i64(i, static_cast<int64_t>(acc_i[static_cast<size_t>(i)]));
  }
  return {out};
}

// Start of a dynamic_slice / dynamic_update_slice block in each dim: operand first + k, clamped
// to [0, dim - size] so the block fits (lax / StableHLO).
Ints clamped_starts(const EvalContext& ctx, size_t first, const Shape& x, const Shape& block) {
  Ints start;
  for (int k = 0; k < x.rank(); ++k)
    start.push_back(std::clamp<int64_t>(ctx.operands[first + static_cast<size_t>(k)].get_i64(0), 0,
                                        x[k] - block[k]));
  return start;
}

std::vector<Tensor> eval_dynamic_slice(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  Tensor out = result_tensor(ctx);
  Ints start = clamped_starts(ctx, 1, x.shape(), out.shape());
  Ints in_idx(start.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = unravel(i, out.shape());
    for (size_t k = 0; k < start.size(); ++k) in_idx[k] = start[k] + idx[k];
    copy_elem(out, i, x, ravel(in_idx, x.shape()));
  }
  return {out};
}

std::vector<Tensor> eval_dynamic_update_slice(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& update = ctx.operands[1];
  Tensor out = result_tensor(ctx);
  if (out.nbytes() > 0) std::memcpy(out.data(), x.data(), out.nbytes());
  Ints start = clamped_starts(ctx, 2, x.shape(), update.shape());
  Ints out_idx(start.size());
  for (int64_t i = 0; i < update.numel(); ++i) {
    Ints idx = unravel(i, update.shape());
    for (size_t k = 0; k < start.size(); ++k) out_idx[k] = start[k] + idx[k];
    copy_elem(out, ravel(out_idx, out.shape()), update, i);
  }
  return {out};
}

std::vector<Tensor> eval_reverse(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  int rank = x.shape().rank();
  std::vector<bool> flip(static_cast<size_t>(rank), false);
  for (int64_t a : ctx.attrs().get_ints("axes"))
    flip[static_cast<size_t>(x.shape().normalize_axis(a))] = true;
  Tensor out = result_tensor(ctx);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = unravel(i, out.shape());
    for (int d = 0; d < rank; ++d)
      if (flip[static_cast<size_t>(d)])
        idx[static_cast<size_t>(d)] = x.shape()[d] - 1 - idx[static_cast<size_t>(d)];
    copy_elem(out, i, x, ravel(idx, x.shape()));
  }
  return {out};
}

}  // namespace

void register_eval_shape() {
  set_eval(OpKind::Reshape, eval_flat_copy);
  set_eval(OpKind::Transpose, eval_transpose);
  set_eval(OpKind::BroadcastInDim, eval_broadcast_in_dim);
  set_eval(OpKind::Expand, eval_expand);
  set_eval(OpKind::Slice, eval_slice);
  set_eval(OpKind::Concatenate, eval_concatenate);
  set_eval(OpKind::Pad, eval_pad);
  set_eval(OpKind::Gather, eval_gather);
  set_eval(OpKind::TakeAlongAxis, eval_take_along_axis);
  set_eval(OpKind::ScatterAdd, eval_scatter_add);
  set_eval(OpKind::DynamicSlice, eval_dynamic_slice);
  set_eval(OpKind::DynamicUpdateSlice, eval_dynamic_update_slice);
  set_eval(OpKind::Reverse, eval_reverse);
  set_eval(OpKind::Squeeze, eval_flat_copy);
  set_eval(OpKind::ExpandDims, eval_flat_copy);
}

}  // namespace rlx::detail
