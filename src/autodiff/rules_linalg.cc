// vjp rules of dot_general and of the reductions (sum, max, min, prod, cumsum).
#include <algorithm>

#include "rules.h"

namespace rlx::autodiff::detail {
namespace {

using C = VjpContext;
using Grads = std::vector<Value>;
using Ints = std::vector<int64_t>;

bool contains(const Ints& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Cotangent of one dot_general operand ("a", the other is "b"). The result is
// [batch, a free, b free]; contracting ct's b-free dims with b's free dims gives
// [batch, a free, b contract (ascending)], which is transposed into a's layout, where a's
// contracting dim a_contract[i] pairs with b_contract[i]. jax's _dot_general_transpose_lhs.
Value dot_transpose(Graph& g, Value ct, Value b, const Ints& a_batch, const Ints& a_contract,
                    int a_rank, const Ints& b_batch, const Ints& b_contract, bool a_is_lhs,
                    DType a_dtype) {
  const int b_rank = g.shape(b).rank();
  const int64_t nb = static_cast<int64_t>(a_batch.size());
  Ints a_free, b_free;
  for (int64_t d = 0; d < a_rank; ++d)
    if (!contains(a_batch, d) && !contains(a_contract, d)) a_free.push_back(d);
  for (int64_t d = 0; d < b_rank; ++d)
    if (!contains(b_batch, d) && !contains(b_contract, d)) b_free.push_back(d);
  const int64_t na = static_cast<int64_t>(a_free.size());
  // ct dims: [batch 0..nb), [lhs free], [rhs free].
  Ints ct_batch, ct_b_free;
  for (int64_t i = 0; i < nb; ++i) ct_batch.push_back(i);
  int64_t b_free_start = a_is_lhs ? nb + na : nb;
  for (size_t i = 0; i < b_free.size(); ++i)
    ct_b_free.push_back(b_free_start + static_cast<int64_t>(i));
  // r = dot_general(ct, b): [batch, ct free (= a free, in order), b contract dims ascending].
  // A preferred result dtype (e.g. f32 from bf16 operands) gives an f32 cotangent: the
  // transpose runs in the operand dtype.
  if (g.dtype(ct) != a_dtype) ct = g.convert(ct, a_dtype);
  Value r = g.dot_general(ct, b, ct_batch, b_batch, ct_b_free, b_free);
  Ints sorted_b_contract = b_contract;
  std::sort(sorted_b_contract.begin(), sorted_b_contract.end());
  Ints perm(static_cast<size_t>(a_rank));
  for (int64_t i = 0; i < nb; ++i) perm[static_cast<size_t>(a_batch[static_cast<size_t>(i)])] = i;
  for (int64_t i = 0; i < na; ++i)
    perm[static_cast<size_t>(a_free[static_cast<size_t>(i)])] = nb + i;
  for (size_t i = 0; i < a_contract.size(); ++i) {
    auto pos = std::find(sorted_b_contract.begin(), sorted_b_contract.end(), b_contract[i]) -
               sorted_b_contract.begin();
    perm[static_cast<size_t>(a_contract[i])] = nb + na + pos;
  }
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  return identity ? r : g.transpose(r, perm);
}

Grads vjp_dot_general(C& c) {
  const AttrMap& a = c.node.attrs;
  Ints lb = a.get_ints("lhs_batch"), rb = a.get_ints("rhs_batch");
  Ints lc = a.get_ints("lhs_contract"), rc = a.get_ints("rhs_contract");
  TensorType lt = c.operand_type(0), rt = c.operand_type(1);
  Grads out(2);
  if (c.wants[0])
    out[0] =
        dot_transpose(c.g, c.ct(), c.operands[1], lb, lc, lt.shape.rank(), rb, rc, true, lt.dtype);
  if (c.wants[1])
    out[1] =
        dot_transpose(c.g, c.ct(), c.operands[0], rb, rc, rt.shape.rank(), lb, lc, false, rt.dtype);
  return out;
}

// reduce_sum: the cotangent broadcast back over the reduced axes.
Grads vjp_reduce_sum(C& c) {
  return {broadcast_back(c.g, c.ct(), c.operand_type(0).shape, c.node.attrs.get_ints("axes"))};
}

// reduce_mean: the cotangent over n, broadcast back (n = number of reduced elements).
Grads vjp_reduce_mean(C& c) {
  Shape xs = c.operand_type(0).shape;
  const Ints& axes = c.node.attrs.get_ints("axes");
  double n = 1;
  for (int64_t a : sorted_axes(axes, xs.rank())) n *= static_cast<double>(xs[static_cast<int>(a)]);
  Value scaled = c.g.div(c.ct(), c.g.scalar(n, c.operand_type(0).dtype));
  return {broadcast_back(c.g, scaled, xs, axes)};
}

// reduce_max / reduce_min: ct shared evenly among the elements equal to the result (jax's
// _reduce_chooser_jvp_rule).
Grads vjp_reduce_chooser(C& c) {
  Graph& g = c.g;
  Shape xs = c.operand_type(0).shape;
  const Ints& axes = c.node.attrs.get_ints("axes");
  Value y = broadcast_back(g, c.results[0], xs, axes);
  Value hit = g.convert(g.eq(c.operands[0], y), c.operand_type(0).dtype);
  Value count = broadcast_back(g, g.reduce_sum(hit, axes, true), xs, axes);
  return {g.div(g.mul(broadcast_back(g, c.ct(), xs, axes), hit), count)};
}

// reduce_prod: d/dx_i = product of the other elements. Computed exactly with zeros: with no
// zero it is prod / x_i; with exactly one zero only that element gets the product of the
// non-zeros; with more, all are 0.
Grads vjp_reduce_prod(C& c) {
  Graph& g = c.g;
  Value x = c.operands[0];
  Shape xs = c.operand_type(0).shape;
  DType dt = c.operand_type(0).dtype;
  const Ints& axes = c.node.attrs.get_ints("axes");
  Value zero = g.scalar(0, dt), one = g.scalar(1, dt);
  Value is_zero = g.eq(x, zero);
  Value nz = broadcast_back(g, g.reduce_sum(g.convert(is_zero, dt), axes, true), xs, axes);
  Value p_nz = broadcast_back(g, g.reduce_prod(g.select(is_zero, one, x), axes, true), xs, axes);
  Value no_zero = g.div(p_nz, g.select(is_zero, one, x));
  Value one_zero = g.select(is_zero, p_nz, zero);
  Value d = g.select(g.eq(nz, zero), no_zero, g.select(g.eq(nz, one), one_zero, zero));
  return {g.mul(broadcast_back(g, c.ct(), xs, axes), d)};
}

// cumsum: the transpose is the cumsum in the opposite direction (same exclusivity).
Grads vjp_cumsum(C& c) {
  const AttrMap& a = c.node.attrs;
  return {c.g.cumsum(c.ct(), a.get_int("axis"), a.get_bool("exclusive"), !a.get_bool("reverse"))};
}

}  // namespace

void register_vjp_linalg() { set_vjp(OpKind::DotGeneral, vjp_dot_general); }

void register_vjp_reduce() {
  set_vjp(OpKind::ReduceSum, vjp_reduce_sum);
  set_vjp(OpKind::ReduceMean, vjp_reduce_mean);
  set_vjp(OpKind::ReduceMax, vjp_reduce_chooser);
  set_vjp(OpKind::ReduceMin, vjp_reduce_chooser);
  set_vjp(OpKind::ReduceProd, vjp_reduce_prod);
  set_vjp(OpKind::CumSum, vjp_cumsum);
}

}  // namespace rlx::autodiff::detail
