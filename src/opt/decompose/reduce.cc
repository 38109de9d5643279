// Decompositions of composite reductions: reduce_mean -> reduce_sum / n.
#include "decompose.h"

namespace rlx::detail {
namespace {

// reduce_mean(x, axes) = reduce_sum(x, axes) / n with n the number of reduced elements as a
// scalar constant (n = 0 gives 0/0 = NaN, the empty-mean identity; axes = [] gives n = 1).
// f16/bf16 are summed and divided in f32 and converted back once, as jnp.mean does, so the
// rounding stays close to the reference (one rounding of the exact mean).
std::vector<Value> decompose_reduce_mean(Graph& g, const Node& node,
                                         std::span<const Value> operands) {
  Value x = operands[0];
  DType t = g.dtype(x);
  const Shape& s = g.shape(x);
  std::vector<int64_t> axes = node.attrs.get_ints("axes");
  double n = 1;  // a double: x may be empty with reduced dims whose product overflows int64
  for (int64_t a : axes) n *= static_cast<double>(s[static_cast<int>(a < 0 ? a + s.rank() : a)]);
  bool upcast = t == DType::f16 || t == DType::bf16;
  DType ct = upcast ? DType::f32 : t;
  if (upcast) x = g.convert(x, ct);
  Value sum = g.reduce_sum(x, axes, node.attrs.get_bool("keepdims"));
  Value mean = g.div(sum, g.scalar(n, ct));
  if (upcast) mean = g.convert(mean, t);
  return {mean};
}

}  // namespace

void register_decompose_reduce() { set_decomposition(OpKind::ReduceMean, decompose_reduce_mean); }

}  // namespace rlx::detail
