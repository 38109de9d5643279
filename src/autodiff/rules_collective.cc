// vjp rules of the collectives. The function differentiated is the global one of an SPMD run,
// sum over devices d of <ct_d, y_d>, with respect to every device's operand; each rule is the
// per-device program of that transpose (the same participants as the forward op):
//   all_reduce sum / mean: all_reduce sum / mean of ct (y_d = sum_e x_e for every d of a group);
//   all_reduce max / min:  all_reduce sum of ct, routed to the elements equal to the result and
//                          split evenly among the devices that hold them (ties share, as
//                          reduce_max's rule and jax's _reduce_chooser_jvp_rule);
//   all_gather(axis a):    reduce_scatter(ct, scatter_dimension a) (device r gets the sum of
//                          every device's block r);
//   reduce_scatter(dim a): all_gather(ct, axis a);
//   all_to_all(s, c):      all_to_all(ct, split_axis c, concat_axis s) (a permutation's
//                          transpose is its inverse).
#include <string>

#include "rules.h"

namespace rlx::autodiff::detail {
namespace {

using C = VjpContext;
using Grads = std::vector<Value>;

// The forward node's participant attributes plus `op_attrs`.
AttrMap participants(const C& c, AttrMap op_attrs) {
  for (const char* k : {"replica_groups", "axis_size", "axis_name"})
    if (c.node.attrs.has(k)) op_attrs.set(k, c.node.attrs.get(k));
  return op_attrs;
}

Value all_reduce(C& c, Value v, const std::string& reduce) {
  return c.g.emit1(OpKind::AllReduce, {v}, participants(c, {{"reduce", reduce}}));
}

Grads vjp_all_reduce(C& c) {
  if (!is_float(c.operand_type(0).dtype)) return {Value{}};
  const std::string& reduce = c.node.attrs.get_string("reduce");
  if (reduce == "sum" || reduce == "mean") return {all_reduce(c, c.ct(), reduce)};
  Graph& g = c.g;
  DType t = c.operand_type(0).dtype;
  Value hit = g.convert(g.eq(c.operands[0], c.results[0]), t);
  Value count = all_reduce(c, hit, "sum");
  return {g.div(g.mul(all_reduce(c, c.ct(), "sum"), hit), count)};
}

Grads vjp_all_gather(C& c) {
  if (!is_float(c.operand_type(0).dtype)) return {Value{}};
  return {c.g.emit1(OpKind::ReduceScatter, {c.ct()},
                    participants(c, {{"scatter_dimension", c.node.attrs.get_int("axis")}}))};
}

Grads vjp_reduce_scatter(C& c) {
  if (!is_float(c.operand_type(0).dtype)) return {Value{}};
  return {c.g.emit1(OpKind::AllGather, {c.ct()},
                    participants(c, {{"axis", c.node.attrs.get_int("scatter_dimension")}}))};
}

Grads vjp_all_to_all(C& c) {
  if (!is_float(c.operand_type(0).dtype)) return {Value{}};
  return {c.g.emit1(OpKind::AllToAll, {c.ct()},
                    participants(c, {{"split_axis", c.node.attrs.get_int("concat_axis")},
                                     {"concat_axis", c.node.attrs.get_int("split_axis")}}))};
}

}  // namespace

void register_vjp_collective() {
  set_vjp(OpKind::AllReduce, vjp_all_reduce);
  set_vjp(OpKind::AllGather, vjp_all_gather);
  set_vjp(OpKind::ReduceScatter, vjp_reduce_scatter);
  set_vjp(OpKind::AllToAll, vjp_all_to_all);
}

}  // namespace rlx::autodiff::detail
