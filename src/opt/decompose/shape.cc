// Decompositions of composite shape ops: expand -> broadcast_in_dim; squeeze, expand_dims ->
// reshape.
#include <numeric>

#include "decompose.h"

namespace rlx::detail {
namespace {

// numpy broadcasting aligns trailing dims, so operand dim i maps to result dim
// i + (result rank - operand rank); broadcast_in_dim both adds the leading dims and stretches
// the size-1 ones, so no separate reshape is needed when the rank grows.
std::vector<Value> decompose_expand(Graph& dst, const Node& node, std::span<const Value> operands) {
  const Shape& out = node.results[0].shape;
  int rank = dst.shape(operands[0]).rank();
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  std::iota(dims.begin(), dims.end(), int64_t{out.rank() - rank});
  return {dst.broadcast_in_dim(operands[0], out.dims(), std::move(dims))};
}

// squeeze and expand_dims only add or drop size-1 dims: the row-major order is unchanged.
std::vector<Value> decompose_to_reshape(Graph& dst, const Node& node,
                                        std::span<const Value> operands) {
  return {dst.reshape(operands[0], node.results[0].shape.dims())};
}

}  // namespace

void register_decompose_shape() {
  set_decomposition(OpKind::Expand, decompose_expand);
  set_decomposition(OpKind::Squeeze, decompose_to_reshape);
  set_decomposition(OpKind::ExpandDims, decompose_to_reshape);
}

}  // namespace rlx::detail
